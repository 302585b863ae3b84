"""``python -m fedsim ...`` runs the ``fedsim`` command (for an environment whose scripts folder is not on
the PATH, or to pick the interpreter explicitly)."""
from fedsim.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
