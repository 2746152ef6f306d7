import sys

from ootci.runner.cli import main

sys.exit(main())
