import sys

from standin_vllm.cli import main

sys.exit(main())
