"""How the processes of a multi-process run agree, apart from files and
NetKet:

    coordination.py   the protocols in O(P): rounds through process 0, the stop flag,
                      a counting and a simulated store for hundreds of processes (no JAX)
    jax_service.py    those protocols over JAX's coordination service: the run's group,
                      its process count and index, NKSERDE_PEER_TIMEOUT
    peer_watch.py     each process keeps a TCP connection to one other: its loss heard
    lost_processes.py which errors of a run say that a process of it was lost

Imports: errors, jax_internals.
"""
