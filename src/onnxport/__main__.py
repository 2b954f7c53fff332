"""``python -m onnxport``: the ``onnxport`` command, with its exit status, for environments whose scripts
folder is not on ``PATH``."""

import sys

from onnxport.cli import main

if __name__ == "__main__":
    sys.exit(main())
