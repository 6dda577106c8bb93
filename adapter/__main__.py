"""`python -m adapter` is `wva-adapter`."""

from adapter.cli import main

raise SystemExit(main())
