"""The forms, each with its rules. CSRFProtect checks the token of every POST before any view runs;
the log-in and registration forms also carry Flask-WTF's own token field, which their pages show."""

from __future__ import annotations

from flask_wtf import FlaskForm
from wtforms import EmailField, HiddenField, PasswordField, StringField, TextAreaField
from wtforms.validators import DataRequired, Email, EqualTo, Length, Regexp, StopValidation, ValidationError

from . import queries
from .passwords import MAX_PASSWORD_BYTES

TWEET_LENGTH = 280


def _strip(value: str | None) -> str | None:
    return value.strip() if isinstance(value, str) else value


def no_nul(form, field) -> None:
    """Refuse the NUL character: PostgreSQL cannot store it in text, nor look it up.

    First in every text field's validators, and final, so no later check (a
    lookup of the name, say) sends it to the database.
    """
    if isinstance(field.data, str) and "\x00" in field.data:
        raise StopValidation("The NUL character (\\0) is not allowed.")


class LoginForm(FlaskForm):
    name = StringField("Name", validators=[no_nul, DataRequired()], filters=[_strip])
    password = PasswordField("Password", validators=[no_nul, DataRequired()])
    next = HiddenField()


class RegisterForm(FlaskForm):
    name = StringField(
        "Name",
        filters=[_strip],
        validators=[
            no_nul,
            DataRequired(),
            Regexp(r"^[A-Za-z0-9_]{3,32}$", message="3 to 32 letters, digits or underscores."),
        ],
    )
    email = EmailField(
        "Email",
        filters=[_strip],
        validators=[no_nul, DataRequired(), Length(max=254), Email(message="That is not an email address.")],
    )
    password = PasswordField(
        "Password", validators=[no_nul, DataRequired(), Length(min=8, message="At least 8 characters.")]
    )
    confirm = PasswordField(
        "Repeat the password", validators=[no_nul, EqualTo("password", message="The passwords differ.")]
    )

    def validate_name(self, field) -> None:
        if queries.user_named(field.data) is not None:
            raise ValidationError("That name is taken.")

    def validate_email(self, field) -> None:
        if queries.email_taken(field.data):
            raise ValidationError("That email is already registered.")

    def validate_password(self, field) -> None:
        if len(field.data.encode()) > MAX_PASSWORD_BYTES:
            raise ValidationError(f"At most {MAX_PASSWORD_BYTES} bytes (bcrypt ignores the rest).")


class CheckedByCSRFProtect:
    """For a form whose own CSRF field is never shown: its page carries the page's token (``csrf``), and
    CSRFProtect has checked the token of every POST before any view runs. The field would only be signed
    for nothing (a tenth of a millisecond a POST)."""

    csrf = False


class TweetForm(FlaskForm):
    Meta = CheckedByCSRFProtect

    tweet = TextAreaField(
        "What's happening?",
        filters=[_strip],
        validators=[
            no_nul,
            DataRequired(message="Write something first."),
            Length(max=TWEET_LENGTH, message=f"At most {TWEET_LENGTH} characters."),
        ],
    )


class ActionForm(FlaskForm):
    """A button that changes state (follow, delete, log out): where to go next (its page's token is checked
    by CSRFProtect)."""

    Meta = CheckedByCSRFProtect

    next = HiddenField()
