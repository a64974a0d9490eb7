import sys

from costlab.cli import main

sys.exit(main())
