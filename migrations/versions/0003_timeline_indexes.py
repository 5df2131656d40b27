"""Indexes for the timeline, profile and followers reads.

Without them a timeline reads the whole tweets table; with them, one short
index range per followed author.

The stages before the database step run at 0002, everything the app needs
but these indexes; the database step adds them.

Revision ID: 0003
Revises: 0002
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade():
    op.create_index("ix_tweets_author_id_id", "tweets", ["author_id", "id"])
    op.create_index("ix_follows_followed_id_follower_id", "follows", ["followed_id", "follower_id"])


def downgrade():
    op.drop_index("ix_follows_followed_id_follower_id", table_name="follows")
    op.drop_index("ix_tweets_author_id_id", table_name="tweets")
