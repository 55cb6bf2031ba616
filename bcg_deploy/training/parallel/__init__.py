"""Data-parallel training and what keeps it cheap.

- ``distributed``: ``World`` (ranks, collectives, env split), the local launcher and stop requests.
- ``host_reduce``: gradient sums through shared memory between the ranks of one machine.
- ``flat_grads``: one flat gradient buffer per module, reduced in one collective.
- ``syncs``: host-device synchronisations, counted and kept few.
"""
