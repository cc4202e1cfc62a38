"""`python -m xlnet_tf.serving serve|query ...` (the same as `xlnet-tf serve|query`)."""

import sys

from .cli import main

sys.exit(main())
