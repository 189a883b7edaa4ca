"""Software target for mltcp.p4: pipeline model, AF_PACKET ports with shaped links, P4Runtime server."""
