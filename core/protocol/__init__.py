"""The protocol between the panel and its run processes: events, framed streams, output line kinds."""
