"""The broker's RPCs, one module each: list_apply (List, Apply), read, append, fragments (ListFragments), health (FragmentStoreHealth).

:class:`~pyspark_gazette.broker.server.JournalServicer` verifies each call's token and delegates here.
"""
