"""Sessions that end at log out (a per-user epoch), and the events login throttling counts.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade():
    # Plain ALTER TABLE on both databases (SQLite 3.35+ drops columns too): no table copy, which
    # would lose the expression index on lower(name).
    op.add_column("users", sa.Column("session_epoch", sa.Integer(), server_default="0", nullable=False))
    op.create_table(
        "throttle_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("subject", sa.String(length=64), nullable=False),
        sa.Column("at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_throttle_events")),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_throttle_events_kind_subject_at", "throttle_events", ["kind", "subject", "at"])


def downgrade():
    op.drop_index("ix_throttle_events_kind_subject_at", table_name="throttle_events")
    op.drop_table("throttle_events")
    op.drop_column("users", "session_epoch")
