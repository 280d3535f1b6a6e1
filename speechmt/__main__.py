from speechmt.cli import main

raise SystemExit(main())
