"""Who the servers of a stage run as: started as root, an unprivileged user; otherwise the caller.

Root starts nginx (its master keeps root, its workers run as the user, as
nginx's own ``user`` directive does) and uWSGI as that user, and hands it
the folders they write:
the run's var folder, the instance folder (the secret key) and the SQLite
database's folder. A user that does not exist is made, a system user with no
login. Started by anyone else, nothing changes: the servers run as the
caller, over the caller's files.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class User:
    name: str
    group: str
    uid: int
    gid: int

    def popen_options(self) -> dict:
        """What ``subprocess.Popen`` needs to start a process as this user, and none of root's groups."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


def serving_user(name: str) -> User | None:
    """The user to serve as when started as root (made if missing); None otherwise, or when told "root"."""
    if os.geteuid() != 0 or name == "root":
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        print(f"==> making the system user {name!r} to serve as (no login, no home)", flush=True)
        useradd = ["useradd", "--system", "--user-group", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
        subprocess.run(useradd, check=True)
        entry = pwd.getpwnam(name)
    return User(name, grp.getgrgid(entry.pw_gid).gr_name, entry.pw_uid, entry.pw_gid)


def hand_over(user: User, folders: list[Path]) -> None:
    """Give ``user`` these folders and everything in them, and a way to reach them, the code and the
    Python installation (uWSGI embeds its libpython: where the user cannot reach it, say under a 0700
    home, the loader quietly takes the system's instead, another patch release)."""
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        for path in [folder, *folder.rglob("*")]:
            os.lchown(path, user.uid, user.gid)
        let_through(folder.parent)
    let_through(Path(sys.base_prefix))


def let_through(folder: Path) -> None:
    """Let every user pass through (not list) each folder above ``folder``, which a folder made for the
    caller alone (0700) forbids; said, as it is done."""
    for each in [folder, *folder.parents]:
        mode = each.stat().st_mode
        if not mode & stat.S_IXOTH:
            print(f"==> letting the servers' user pass through {each} (o+x)", flush=True)
            os.chmod(each, stat.S_IMODE(mode) | stat.S_IXOTH)
