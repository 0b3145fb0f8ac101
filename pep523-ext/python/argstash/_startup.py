"""Installs the hook at interpreter start-up (imported by argstash_pep523.pth).

The .pth line imports this module only when ARGSTASH_PEP523 is set to something
other than "" or "0". A failure never stops the program: it is reported on
stderr and the program runs unhooked.
"""

import sys


def _start():
    try:
        import argstash

        argstash.install()
    except Exception as e:  # noqa: BLE001 - never break the program's start-up
        print(f"argstash: ARGSTASH_PEP523 is set but the hook was not installed: {e}", file=sys.stderr)


_start()
