from mcp_rl.cli import main

raise SystemExit(main())
