"""``python -m cluster``: see :mod:`cluster.local`."""

from cluster.local import main

raise SystemExit(main())
