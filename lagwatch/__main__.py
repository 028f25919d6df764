from lagwatch.entry import main

raise SystemExit(main())
