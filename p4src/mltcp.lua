-- Wireshark dissector for the 12-byte MLTCP shim carried in UDP (port 9199).
-- Layout: docs/CONTRACTS.md. Install: copy to ~/.local/lib/wireshark/plugins/ (or run
-- `wireshark -X lua_script:mltcp.lua`, `tshark -X lua_script:mltcp.lua -r capture.pcap`).

local MLTCP_PORT = 9199
local MLTCP_LEN = 12

local p_mltcp = Proto("mltcp", "MLTCP shim")

local f_version     = ProtoField.uint8("mltcp.version", "Version", base.DEC, nil, 0xF0)
local f_flags       = ProtoField.uint8("mltcp.flags", "Flags", base.HEX, nil, 0x0F)
local f_flag_ack    = ProtoField.bool("mltcp.flags.ack", "ACK", 8, nil, 0x01)
local f_flag_cnp    = ProtoField.bool("mltcp.flags.cnp", "CNP", 8, nil, 0x02)
local f_flag_iter   = ProtoField.bool("mltcp.flags.iter_start", "ITER_START", 8, nil, 0x04)
local f_flag_ece    = ProtoField.bool("mltcp.flags.ece", "ECE", 8, nil, 0x08)
local f_reserved    = ProtoField.uint8("mltcp.reserved", "Reserved", base.HEX)
local f_job_id      = ProtoField.uint16("mltcp.job_id", "Job id", base.DEC)
local f_iteration   = ProtoField.uint32("mltcp.iteration", "Iteration", base.DEC)
local f_bytes_ratio = ProtoField.uint16("mltcp.bytes_ratio", "Bytes ratio (Q0.16)", base.DEC)
local f_reserved2   = ProtoField.uint16("mltcp.reserved2", "Reserved2", base.HEX)

p_mltcp.fields = { f_version, f_flags, f_flag_ack, f_flag_cnp, f_flag_iter, f_flag_ece,
                   f_reserved, f_job_id, f_iteration, f_bytes_ratio, f_reserved2 }

local e_short = ProtoExpert.new("mltcp.short", "MLTCP shim truncated",
                                expert.group.MALFORMED, expert.severity.ERROR)
local e_version = ProtoExpert.new("mltcp.bad_version", "MLTCP version is not 1",
                                  expert.group.MALFORMED, expert.severity.ERROR)
p_mltcp.experts = { e_short, e_version }

local data_dissector = Dissector.get("data")

function p_mltcp.dissector(tvb, pinfo, tree)
    local subtree = tree:add(p_mltcp, tvb(0, math.min(tvb:len(), MLTCP_LEN)))
    if tvb:len() < MLTCP_LEN then
        subtree:add_proto_expert_info(e_short)
        return 0
    end
    pinfo.cols.protocol = "MLTCP"

    local version = bit.rshift(tvb(0, 1):uint(), 4)
    local vitem = subtree:add(f_version, tvb(0, 1))
    if version ~= 1 then
        vitem:add_proto_expert_info(e_version)
    end
    local fitem = subtree:add(f_flags, tvb(0, 1))
    fitem:add(f_flag_ack, tvb(0, 1))
    fitem:add(f_flag_cnp, tvb(0, 1))
    fitem:add(f_flag_iter, tvb(0, 1))
    fitem:add(f_flag_ece, tvb(0, 1))
    subtree:add(f_reserved, tvb(1, 1))
    subtree:add(f_job_id, tvb(2, 2))
    subtree:add(f_iteration, tvb(4, 4))
    local ratio = tvb(8, 2):uint()
    subtree:add(f_bytes_ratio, tvb(8, 2)):append_text(string.format(" (%.4f)", ratio / 65535))
    subtree:add(f_reserved2, tvb(10, 2))

    pinfo.cols.info:set(string.format("MLTCP job=%d iter=%d ratio=%.3f",
                                      tvb(2, 2):uint(), tvb(4, 4):uint(), ratio / 65535))
    if tvb:len() > MLTCP_LEN then
        data_dissector:call(tvb(MLTCP_LEN):tvb(), pinfo, tree)
    end
    return tvb:len()
end

DissectorTable.get("udp.port"):add(MLTCP_PORT, p_mltcp)
