/* -*- P4_16 -*- */
/*
 * mltcp_tna.p4 -- the MLTCP switch of mltcp.p4 for Intel Tofino (TNA, bf-p4c).
 *
 * NOT COMPILED in this repository: bf-p4c and the Tofino SDE are not available on the build
 * machines. Written against tna.p4 as shipped with the open-sourced SDE; compile with
 *     bf-p4c --arch tna --target tofino -o build/mltcp_tna p4src/mltcp_tna.p4
 * and expect to fix small compiler-version details.
 *
 * Same control names (MyIngress, MyEgress) and object names as mltcp.p4 (docs/CONTRACTS.md),
 * so one control plane drives both. Differences from the v1model program:
 *  - Queue depth: eg_intr_md.enq_qdepth counts 80-byte queue cells on Tofino, not packets,
 *    so MyEgress.set_ecn_threshold's `threshold` is in cells here.
 *  - The ecn_threshold key is eg_intr_md.egress_port, named "standard_metadata.egress_port"
 *    for the control plane with @name, so table entries are identical on both targets.
 *  - Parser errors: a shim version other than 1, or IPv4 with options (ihl != 5; no varbit
 *    on Tofino) other than exactly the MLTCP IPv4 option (ihl 7: kind 94, length 8,
 *    version 1), leaves the parser with no matching transition; the Tofino parser flags
 *    that (and truncation) in ig_prsr_md.parser_err, which ingress counts and drops.
 *  - Register writes go through a RegisterAction.
 *  - progress_contest: contest_seen holds 32 bits of the global timestamp in 1.024 us units
 *    (global_tstamp[41:10], wrapping after 73 minutes), so set_contest_window's `window` counts
 *    those units here (2.4 % longer than v1model's microseconds).
 *  - Progress (job_id, bytes_ratio) comes from the UDP shim or, without it, the MLTCP IPv4
 *    option; each control copies it into its metadata first (ProgressFromHeaders).
 */

#include <core.p4>
#include <tna.p4>

const bit<16> TYPE_IPV4 = 0x0800;
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_UDP = 17;
const bit<16> MLTCP_UDP_PORT = 9199;
const bit<4>  MLTCP_VERSION = 1;
const bit<2>  ECN_CE = 3;
#define MLTCP_MAX_JOBS 1024
typedef bit<10> job_index_t;   /* log2(MLTCP_MAX_JOBS) */

typedef bit<48> macAddr_t;
typedef bit<32> ip4Addr_t;

/*************************************************************************
*********************** H E A D E R S  ***********************************
*************************************************************************/

header ethernet_t {
    macAddr_t dstAddr;
    macAddr_t srcAddr;
    bit<16>   etherType;
}

header ipv4_t {
    bit<4>    version;
    bit<4>    ihl;
    bit<6>    diffserv;
    bit<2>    ecn;
    bit<16>   totalLen;
    bit<16>   identification;
    bit<3>    flags;
    bit<13>   fragOffset;
    bit<8>    ttl;
    bit<8>    protocol;
    bit<16>   hdrChecksum;
    ip4Addr_t srcAddr;
    ip4Addr_t dstAddr;
}

/* The MLTCP IPv4 option: the shim's job_id and bytes_ratio for packets without it. */
header mltcp_ipopt_t {
    bit<8>  kind;         /* 94 */
    bit<8>  len;          /* 8 */
    bit<4>  version;
    bit<4>  flags;
    bit<8>  reserved;
    bit<16> job_id;
    bit<16> bytes_ratio;
}

header tcp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<32> seqNo;
    bit<32> ackNo;
    bit<4>  dataOffset;
    bit<4>  res;
    bit<8>  flags;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgentPtr;
}

header udp_t {
    bit<16> srcPort;
    bit<16> dstPort;
    bit<16> length_;
    bit<16> checksum;
}

header mltcp_t {
    bit<4>  version;
    bit<4>  flags;        /* bit0 ACK, bit1 CNP, bit2 ITER_START, bit3 ECE */
    bit<8>  reserved;
    bit<16> job_id;
    bit<32> iteration;
    bit<16> bytes_ratio;  /* Q0.16, 0xFFFF = 1.0 */
    bit<16> reserved2;
}

struct headers {
    ethernet_t ethernet;
    ipv4_t     ipv4;
    mltcp_ipopt_t mltcp_ipopt;
    tcp_t      tcp;
    udp_t      udp;
    mltcp_t    mltcp;
}

struct ingress_metadata_t {
    bit<4>  progress_band;   /* bytes_ratio[15:12] */
    bit<1>  has_progress;    /* a shim or the MLTCP IPv4 option is valid */
    bit<16> job_id;
    bit<16> bytes_ratio;
}

struct egress_metadata_t {
    bit<1>  ecn_enabled;
    bit<19> ecn_threshold;
    bit<4>  progress_band;
    bit<20> depth_diff;   /* enq_qdepth - threshold, one extra bit for the sign */
    bit<1>  has_progress;
    bit<16> job_id;
    bit<16> bytes_ratio;
    bit<1>  contest_on;
    bit<32> contest_window;
    bit<32> now;          /* global_tstamp[41:10] */
    bit<16> job_plus1;
    bit<1>  job_changed;
    bit<32> contest_age;
    bit<33> age_diff;     /* contest_age - window, one extra bit for the sign */
}

/*************************************************************************
*********************** P A R S E R S  ***********************************
*************************************************************************/

/* Ethernet .. MLTCP, shared by the ingress and egress parsers. */
parser HeaderParser(packet_in packet, out headers hdr) {

    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            TYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        /* ihl != 5: no transition matches -> parser error (no varbit options on Tofino). */
        transition select(hdr.ipv4.ihl, hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (5, 0, PROTO_TCP): parse_tcp;
            (5, 0, PROTO_UDP): parse_udp;
            (5, _, _): accept;
            (7, _, _): parse_mltcp_ipopt;
        }
    }

    state parse_mltcp_ipopt {
        packet.extract(hdr.mltcp_ipopt);
        /* any other 8 bytes of options, or version != 1: no transition matches -> parser error */
        transition select(hdr.mltcp_ipopt.kind, hdr.mltcp_ipopt.len, hdr.mltcp_ipopt.version,
                          hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (94, 8, MLTCP_VERSION, 0, PROTO_TCP): parse_tcp;
            (94, 8, MLTCP_VERSION, 0, PROTO_UDP): parse_udp;
            (94, 8, MLTCP_VERSION, _, _): accept;
        }
    }

    state parse_tcp {
        packet.extract(hdr.tcp);
        transition accept;
    }

    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dstPort, hdr.udp.srcPort) {
            (MLTCP_UDP_PORT, _): parse_mltcp;
            (_, MLTCP_UDP_PORT): parse_mltcp;
            default: accept;
        }
    }

    state parse_mltcp {
        packet.extract(hdr.mltcp);
        /* version != 1: no transition matches -> parser error. */
        transition select(hdr.mltcp.version) {
            MLTCP_VERSION: accept;
        }
    }
}

parser MyIngressParser(packet_in packet,
                       out headers hdr,
                       out ingress_metadata_t meta,
                       out ingress_intrinsic_metadata_t ig_intr_md) {
    HeaderParser() header_parser;

    state start {
        meta.progress_band = 0;
        meta.has_progress = 0;
        meta.job_id = 0;
        meta.bytes_ratio = 0;
        packet.extract(ig_intr_md);
        transition select(ig_intr_md.resubmit_flag) {
            0: parse_port_metadata;
        }
    }

    state parse_port_metadata {
        packet.advance(PORT_METADATA_SIZE);
        header_parser.apply(packet, hdr);
        transition accept;
    }
}

parser MyEgressParser(packet_in packet,
                      out headers hdr,
                      out egress_metadata_t meta,
                      out egress_intrinsic_metadata_t eg_intr_md) {
    HeaderParser() header_parser;

    state start {
        packet.extract(eg_intr_md);
        meta.ecn_enabled = 0;
        meta.ecn_threshold = 0;
        meta.depth_diff = 0;
        meta.progress_band = 0;
        meta.has_progress = 0;
        meta.job_id = 0;
        meta.bytes_ratio = 0;
        header_parser.apply(packet, hdr);
        transition accept;
    }
}

/*************************************************************************
**************  I N G R E S S   P R O C E S S I N G   *******************
*************************************************************************/

/* The packet's progress: the UDP shim's, else the MLTCP IPv4 option's (has = 0: neither). */
control ProgressFromHeaders(in headers hdr, out bit<1> has, out bit<16> job_id, out bit<16> ratio) {
    apply {
        has = 0;
        job_id = 0;
        ratio = 0;
        if (hdr.mltcp.isValid()) {
            has = 1;
            job_id = hdr.mltcp.job_id;
            ratio = hdr.mltcp.bytes_ratio;
        } else if (hdr.mltcp_ipopt.isValid()) {
            has = 1;
            job_id = hdr.mltcp_ipopt.job_id;
            ratio = hdr.mltcp_ipopt.bytes_ratio;
        }
    }
}

control MyIngress(inout headers hdr,
                  inout ingress_metadata_t meta,
                  in ingress_intrinsic_metadata_t ig_intr_md,
                  in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                  inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                  inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {

    ProgressFromHeaders() progress;
    Counter<bit<64>, job_index_t>(MLTCP_MAX_JOBS, CounterType_t.PACKETS_AND_BYTES) job_tx;
    Counter<bit<32>, bit<1>>(1, CounterType_t.PACKETS) parse_errors;
    Register<bit<16>, job_index_t>(MLTCP_MAX_JOBS, 0) job_bytes_ratio;

    RegisterAction<bit<16>, job_index_t, bit<16>>(job_bytes_ratio) write_bytes_ratio = {
        void apply(inout bit<16> value) {
            value = meta.bytes_ratio;
        }
    };

    action drop() {
        ig_dprsr_md.drop_ctl = 1;
    }

    action ipv4_forward(macAddr_t dstAddr, PortId_t port) {
        ig_tm_md.ucast_egress_port = port;
        hdr.ethernet.srcAddr = hdr.ethernet.dstAddr;
        hdr.ethernet.dstAddr = dstAddr;
        hdr.ipv4.ttl = hdr.ipv4.ttl - 1;
    }

    table ipv4_lpm {
        key = {
            hdr.ipv4.dstAddr: lpm;
        }
        actions = {
            ipv4_forward;
            drop;
            NoAction;
        }
        size = 1024;
        default_action = drop();
    }

    /* strict priority by iteration progress: the band's queue (Tofino queues of the port,
       configured strict-priority by the control plane; higher is served first) */
    action set_progress_priority(bit<3> priority) {
        ig_tm_md.qid = (QueueId_t)priority;
    }

    table progress_priority {
        key = {
            ig_tm_md.ucast_egress_port: exact @name("standard_metadata.egress_spec");
            meta.progress_band: exact;
        }
        actions = {
            set_progress_priority;
            NoAction;
        }
        size = 8192;
        default_action = NoAction();
    }

    apply {
        if (ig_prsr_md.parser_err != 0) {
            parse_errors.count(0);
            drop();
        } else if (hdr.ipv4.isValid()) {
            progress.apply(hdr, meta.has_progress, meta.job_id, meta.bytes_ratio);
            if (meta.has_progress == 1 && meta.job_id < MLTCP_MAX_JOBS) {
                job_tx.count((job_index_t)meta.job_id);
                write_bytes_ratio.execute((job_index_t)meta.job_id);
            }
            if (hdr.ipv4.ttl <= 1) {
                /* RFC 1812 5.3.1: a router does not forward a packet whose TTL would
                 * reach 0 (nor one that arrives with 0); no ICMP Time Exceeded here. */
                drop();
            } else {
                ipv4_lpm.apply();
                if (meta.has_progress == 1) {
                    meta.progress_band = meta.bytes_ratio[15:12];
                    progress_priority.apply();
                }
            }
        } else {
            drop();
        }
    }
}

control MyIngressDeparser(packet_out packet,
                          inout headers hdr,
                          in ingress_metadata_t meta,
                          in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    Checksum() ipv4_checksum;

    apply {
        /* TTL changed in ingress. */
        hdr.ipv4.hdrChecksum = ipv4_checksum.update({
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.ecn,
            hdr.ipv4.totalLen, hdr.ipv4.identification, hdr.ipv4.flags,
            hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol,
            hdr.ipv4.srcAddr, hdr.ipv4.dstAddr,
            hdr.mltcp_ipopt.kind, hdr.mltcp_ipopt.len, hdr.mltcp_ipopt.version,
            hdr.mltcp_ipopt.flags, hdr.mltcp_ipopt.reserved, hdr.mltcp_ipopt.job_id,
            hdr.mltcp_ipopt.bytes_ratio });
        packet.emit(hdr);
    }
}

/*************************************************************************
****************  E G R E S S   P R O C E S S I N G   *******************
*************************************************************************/

control MyEgress(inout headers hdr,
                 inout egress_metadata_t meta,
                 in egress_intrinsic_metadata_t eg_intr_md,
                 in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
                 inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
                 inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {

    ProgressFromHeaders() progress;
    Counter<bit<32>, job_index_t>(MLTCP_MAX_JOBS, CounterType_t.PACKETS) job_ecn_marks;

    /* threshold: queue depth at which ECN-capable packets get CE (80-byte cells on Tofino). */
    action set_ecn_threshold(bit<19> threshold) {
        meta.ecn_enabled = 1;
        meta.ecn_threshold = threshold;
    }

    table ecn_threshold {
        key = {
            eg_intr_md.egress_port: exact @name("standard_metadata.egress_port");
        }
        actions = {
            set_ecn_threshold;
            NoAction;
        }
        size = 512;
        default_action = NoAction();
    }

    /* a per-packet threshold by iteration progress: replaces the port's for MLTCP packets */
    action set_progress_ecn(bit<19> threshold) {
        meta.ecn_enabled = 1;
        meta.ecn_threshold = threshold;
    }

    /* priority_ecn = off: MLTCP packets of this band are never marked (drop-tail only); the
       other bands' entries set their thresholds (TNA's enq_qdepth is the packet's own queue (qid), so a threshold here
       compares with the band's queue) */
    action no_progress_ecn() {
        meta.ecn_enabled = 0;
    }

    /* contested: another job's packet left this port within the window, so the port is shared
       and progress_ecn's per-band thresholds apply; alone, the port's threshold does */
    Register<bit<16>, PortId_t>(512, 0) contest_job;    /* last MLTCP job at the port, + 1 */
    Register<bit<32>, PortId_t>(512, 0) contest_seen;   /* when the job last changed there */

    RegisterAction<bit<16>, PortId_t, bit<1>>(contest_job) swap_contest_job = {
        void apply(inout bit<16> value, out bit<1> changed) {
            changed = 0;
            if (value != 0 && value != meta.job_plus1) {
                changed = 1;
            }
            value = meta.job_plus1;
        }
    };

    RegisterAction<bit<32>, PortId_t, bit<32>>(contest_seen) stamp_contest_seen = {
        void apply(inout bit<32> value, out bit<32> age) {
            value = meta.now;
            age = 0;
        }
    };

    RegisterAction<bit<32>, PortId_t, bit<32>>(contest_seen) age_contest_seen = {
        void apply(inout bit<32> value, out bit<32> age) {
            age = meta.now - value;
        }
    };

    action set_contest_window(bit<32> window) {
        meta.contest_on = 1;
        meta.contest_window = window;
    }

    table progress_contest {
        key = {
            eg_intr_md.egress_port: exact @name("standard_metadata.egress_port");
        }
        actions = {
            set_contest_window;
            NoAction;
        }
        size = 512;
        default_action = NoAction();
    }

    table progress_ecn {
        key = {
            eg_intr_md.egress_port: exact @name("standard_metadata.egress_port");
            meta.progress_band: exact;
        }
        actions = {
            set_progress_ecn;
            no_progress_ecn;
            NoAction;
        }
        size = 8192;
        default_action = NoAction();
    }

    apply {
        if (hdr.ipv4.isValid()) {
            progress.apply(hdr, meta.has_progress, meta.job_id, meta.bytes_ratio);
            ecn_threshold.apply();
            if (meta.has_progress == 1) {
                meta.progress_band = meta.bytes_ratio[15:12];
                meta.contest_on = 0;
                progress_contest.apply();
                bit<1> contested = 1;
                if (meta.contest_on == 1) {
                    meta.now = eg_prsr_md.global_tstamp[41:10];
                    meta.job_plus1 = meta.job_id + 1;
                    meta.job_changed = swap_contest_job.execute(eg_intr_md.egress_port);
                    if (meta.job_changed == 1) {
                        meta.contest_age = stamp_contest_seen.execute(eg_intr_md.egress_port);
                    } else {
                        meta.contest_age = age_contest_seen.execute(eg_intr_md.egress_port);
                    }
                    meta.age_diff = (bit<33>)meta.contest_age - (bit<33>)meta.contest_window;
                    if (meta.age_diff[32:32] == 0) {
                        contested = 0;
                    }
                }
                if (contested == 1) {
                    progress_ecn.apply();
                }
            }
            /* enq_qdepth >= threshold, as a subtraction and a sign bit: a gateway cannot
               compare two 19-bit PHV fields directly. */
            meta.depth_diff = (bit<20>)eg_intr_md.enq_qdepth - (bit<20>)meta.ecn_threshold;
            if (meta.ecn_enabled == 1
                    && (hdr.ipv4.ecn == 1 || hdr.ipv4.ecn == 2)
                    && meta.depth_diff[19:19] == 0) {
                hdr.ipv4.ecn = ECN_CE;
                if (meta.has_progress == 1 && meta.job_id < MLTCP_MAX_JOBS) {
                    job_ecn_marks.count((job_index_t)meta.job_id);
                }
            }
        }
    }
}

control MyEgressDeparser(packet_out packet,
                         inout headers hdr,
                         in egress_metadata_t meta,
                         in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_checksum;

    apply {
        /* ECN may have changed in egress. */
        hdr.ipv4.hdrChecksum = ipv4_checksum.update({
            hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.ecn,
            hdr.ipv4.totalLen, hdr.ipv4.identification, hdr.ipv4.flags,
            hdr.ipv4.fragOffset, hdr.ipv4.ttl, hdr.ipv4.protocol,
            hdr.ipv4.srcAddr, hdr.ipv4.dstAddr,
            hdr.mltcp_ipopt.kind, hdr.mltcp_ipopt.len, hdr.mltcp_ipopt.version,
            hdr.mltcp_ipopt.flags, hdr.mltcp_ipopt.reserved, hdr.mltcp_ipopt.job_id,
            hdr.mltcp_ipopt.bytes_ratio });
        packet.emit(hdr);
    }
}

/*************************************************************************
***********************  S W I T C H  ***********************************
*************************************************************************/

Pipeline(MyIngressParser(),
         MyIngress(),
         MyIngressDeparser(),
         MyEgressParser(),
         MyEgress(),
         MyEgressDeparser()) pipe;

Switch(pipe) main;
