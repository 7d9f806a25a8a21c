"""Generated protocol stubs (tools/gen_protocol.py). Do not edit."""
