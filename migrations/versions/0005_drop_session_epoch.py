"""Drop users.session_epoch: sessions are rows of throttle_events (kind "session"),
each ended on its own, so no per-user counter is read any more.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade():
    # In place on both engines (SQLite 3.35 and later drop a column that no index uses), so
    # the table keeps its expression index, which rebuilding it in batch mode would lose.
    op.drop_column("users", "session_epoch")


def downgrade():
    op.add_column("users", sa.Column("session_epoch", sa.Integer(), server_default="0", nullable=False))
