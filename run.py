"""Stage 0: Flask's development server, on 127.0.0.1:5000 unless TWEEPY_HOST / TWEEPY_PORT say otherwise."""

import os

from tweepy import create_app

app = create_app()

if __name__ == "__main__":
    app.run(
        host=os.environ.get("TWEEPY_HOST", "127.0.0.1"),
        port=int(os.environ.get("TWEEPY_PORT", "5000")),
        debug=False,
        # The talk's stage 0 is a single-threaded server; threads come with uWSGI.
        threaded=False,
    )
