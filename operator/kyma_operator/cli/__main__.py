"""``python -m kyma_operator.cli`` runs the ``kyma`` command."""

from kyma_operator.cli.main import main

main()
