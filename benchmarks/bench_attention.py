"""The attention benchmark, runnable from a source checkout: the same code as `attnlab bench`.

python benchmarks/bench_attention.py [--quick] [--json PATH]
"""

import sys

from attnlab.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
