"""An index for finding users by a prefix of their name, on PostgreSQL.

SQLite's index on lower(name) is in code point order and serves a prefix range
as it is; PostgreSQL's is in the database's collation, so the search compares
in the "C" collation and needs an index in it. On SQLite this revision does
nothing.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade():
    if op.get_bind().dialect.name == "postgresql":
        op.execute('CREATE INDEX ix_users_name_lower_c ON users ((lower(name) COLLATE "C"))')


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_users_name_lower_c", table_name="users")
