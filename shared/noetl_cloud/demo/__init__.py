"""``noetl-cloud demo``: the whole system in one run on the local stack (docs/demo.md).

``setup`` prepares what the demo needs in a running stack (the launcher calls it too), ``fixture``
serves the paginated API the demo playbook fetches, ``senders`` signs webhooks and publishes
Pub/Sub messages, ``run`` is the command: ``phases`` drives the phases and checks the outcome,
``report`` names what did not hold and prints the summary.
"""
