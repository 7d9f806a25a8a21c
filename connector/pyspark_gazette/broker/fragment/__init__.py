"""The broker's fragment lifecycle: spool (open fragment), index, persister, refresher, syncer, postfix and stores."""
