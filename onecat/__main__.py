import sys

from onecat.cli import main

sys.exit(main())
