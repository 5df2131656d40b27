"""Users, tweets, follows, and the cache invalidation log.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# 64-bit ids, as in the models: BIGINT on PostgreSQL, INTEGER (the rowid, already 64-bit) on SQLite.
ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade():
    op.create_table(
        "users",
        sa.Column("id", ID, nullable=False),
        sa.Column("name", sa.String(length=32), nullable=False),
        sa.Column("email", sa.String(length=254), nullable=False),
        sa.Column("password_hash", sa.String(length=60), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
        sa.UniqueConstraint("email", name=op.f("uq_users_email")),
        sa.UniqueConstraint("name", name=op.f("uq_users_name")),
    )
    op.create_index("uq_users_name_lower", "users", [sa.text("lower(name)")], unique=True)
    op.create_table(
        "tweets",
        sa.Column("id", ID, nullable=False),
        sa.Column("author_id", ID, nullable=False),
        sa.Column("text", sa.String(length=280), nullable=False),
        sa.Column("posted", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["author_id"], ["users.id"], name=op.f("fk_tweets_author_id_users")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tweets")),
        # Never reuse the id of a deleted tweet: ids are cache keys and page bounds.
        sqlite_autoincrement=True,
    )
    op.create_table(
        "follows",
        sa.Column("follower_id", ID, nullable=False),
        sa.Column("followed_id", ID, nullable=False),
        sa.ForeignKeyConstraint(["followed_id"], ["users.id"], name=op.f("fk_follows_followed_id_users")),
        sa.ForeignKeyConstraint(["follower_id"], ["users.id"], name=op.f("fk_follows_follower_id_users")),
        sa.PrimaryKeyConstraint("follower_id", "followed_id", name=op.f("pk_follows")),
    )
    op.create_table(
        "cache_invalidations",
        sa.Column("id", ID, nullable=False),
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("created", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cache_invalidations")),
        # Processes replay the log by id: an id must never come back.
        sqlite_autoincrement=True,
    )


def downgrade():
    op.drop_table("cache_invalidations")
    op.drop_table("follows")
    op.drop_table("tweets")
    op.drop_index("uq_users_name_lower", table_name="users")
    op.drop_table("users")
