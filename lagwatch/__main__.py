from lagwatch.cli import main

raise SystemExit(main())
