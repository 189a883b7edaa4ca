"""P4 sources and the committed P4Info for MLTCP (data files installed with the package).

``P4_PATH`` (v1model, BMv2), ``TNA_PATH`` (Tofino) and ``P4INFO_PATH`` (text-format
p4.config.v1.P4Info for ``P4_PATH``); ``load_p4info()`` parses the latter.
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent
P4_PATH = HERE / "mltcp.p4"
TNA_PATH = HERE / "mltcp_tna.p4"
P4INFO_PATH = HERE / "mltcp.p4info.txtpb"
DISSECTOR_PATH = HERE / "mltcp.lua"


def load_p4info(path: Path | str = P4INFO_PATH):
    """Parse a text-format P4Info file into a ``p4.config.v1.p4info_pb2.P4Info``."""
    from google.protobuf import text_format
    from p4.config.v1 import p4info_pb2

    info = p4info_pb2.P4Info()
    text_format.Parse(Path(path).read_text(), info)
    return info
