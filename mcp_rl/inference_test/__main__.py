import os
import sys

from mcp_rl.inference_test.runner import main

# Test folders hold prompts and model output: readable by the user only.
os.umask(0o077)
sys.exit(main())
