"""What every command's parser shares: the program name and the one-line error style.

Apart from ``cli`` so that commands defined elsewhere (``record``, ``check``, ...) use them
without importing the CLI that imports them.
"""

from __future__ import annotations

import argparse

PROG = "rezolus-ue"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line plus where to look."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # One line plus where to look, instead of argparse's full usage block.
        self.exit(2, f"{self.prog}: error: {message}\nTry '{self.prog} --help'.\n")
