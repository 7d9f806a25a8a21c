"""``python -m pyspark_gazette.broker --listen HOST:PORT --data-dir DIR [--file-root DIR]``."""

import sys

from pyspark_gazette.broker.main import broker_main

if __name__ == "__main__":
    sys.exit(broker_main())
