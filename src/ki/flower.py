"""`python -m ki.flower`: the Procfile's `flower` line, Celery's monitor behind a password.

Flower shows every task's arguments and can revoke tasks and shut workers down,
so it starts only with `flower.basic_auth` set, and binds `flower.address`
(loopback unless configured). The credentials reach Flower through its own
FLOWER_BASIC_AUTH variable, not the command line, so `ps` never shows them.
"""

from __future__ import annotations

import os
import sys

from ki_core.config import ConfigError, Settings, load_settings

MISSING_AUTH = (
    "flower: flower.basic_auth is not set (KI_FLOWER__BASIC_AUTH=user:password); "
    "Flower can revoke tasks and stop workers, so it does not start without a password"
)


def flower_command(settings: Settings) -> tuple[list[str], dict[str, str]]:
    """The argv and the extra environment that start Flower; ConfigError without credentials."""
    auth = settings.flower.basic_auth.get_secret_value() if settings.flower.basic_auth else ""
    if not all(":" in pair and pair.split(":", 1)[0] and pair.split(":", 1)[1] for pair in auth.split(",")):
        raise ConfigError(MISSING_AUTH if not auth else "flower: flower.basic_auth must be user:password[,user:password]")
    argv = [sys.executable, "-m", "celery", "-A", "ki_workers.app", "flower",
            f"--address={settings.flower.address}", f"--port={settings.flower.port}"]
    return argv, {"FLOWER_BASIC_AUTH": auth}


def main() -> None:
    try:
        argv, extra = flower_command(load_settings())
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        raise SystemExit(2) from None
    os.execve(argv[0], argv, {**os.environ, **extra})


if __name__ == "__main__":
    main()
