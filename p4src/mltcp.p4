/* -*- P4_16 -*- */
/*
 * mltcp.p4 -- MLTCP-aware IPv4 switch for the v1model architecture (BMv2 simple_switch_grpc).
 *
 *  - Parses Ethernet / IPv4 / TCP / UDP and, when a UDP port is 9199, the 12-byte MLTCP shim
 *    (docs/CONTRACTS.md). A packet without the shim may carry the same progress in the 8-byte
 *    MLTCP IPv4 option (IHL 7, options starting with kind 94, length 8: kernel TCP stamped by
 *    traffic/kernel/stamp.bpf.c); other IPv4 options are skipped, and a shim wins over the
 *    option. Either with version != 1 is a parser error (MLTCPBadVersion); a packet cut short
 *    inside a header is PacketTooShort. The parser copies job_id and bytes_ratio of either into
 *    meta (has_progress), which the controls read.
 *  - Ingress: packets with any parser error are counted in parse_errors and dropped;
 *    IPv4 packets with TTL 0 or 1 are dropped (RFC 1812: a router does not forward them);
 *    IPv4 longest-prefix-match forwarding (ipv4_lpm); for every valid MLTCP packet the per-job
 *    counter job_tx is incremented and the job's last bytes_ratio is written to the register
 *    job_bytes_ratio (index job_id; job_ids >= MLTCP_MAX_JOBS are forwarded but not recorded).
 *  - Egress: per-port ECN threshold (ecn_threshold, queue depth in packets); an ECN-capable
 *    packet (ecn 1 or 2) that found enq_qdepth >= threshold is marked CE (ecn 3), and the mark
 *    is counted per job in job_ecn_marks when it carries MLTCP progress.
 *  - In-network MLTCP (docs/in-network.md), chosen by table entries: a packet's progress band
 *    is the top 4 bits of its bytes_ratio. progress_priority (ingress, egress_spec and
 *    band) sets standard_metadata.priority: strict-priority queues by band with BMv2
 *    --priority-queues (higher is served first). progress_ecn (egress, egress_port and band)
 *    gives the packet its own ECN threshold instead of the port's: a flow behind in its
 *    iteration is marked earlier. No entries: the policy is off.
 *  - The IPv4 header checksum (options included) is recomputed: TTL and ECN change. An IPv4
 *    header with ihl < 5 is a parser error (IPv4BadIHL). Only first fragments are parsed
 *    beyond IPv4. Non-IPv4 frames (including ARP) are dropped: hosts need static ARP
 *    entries, as in the p4lang tutorials.
 *
 * Object names are a contract (docs/CONTRACTS.md); p4src/mltcp_tna.p4 uses the same ones.
 */

#include <core.p4>
#include <v1model.p4>

const bit<16> TYPE_IPV4 = 0x0800;
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_UDP = 17;
const bit<16> MLTCP_UDP_PORT = 9199;
const bit<4>  MLTCP_VERSION = 1;
const bit<16> MLTCP_IPOPT = 0x5E08;   /* kind 94, length 8 */
const bit<2>  ECN_CE = 3;
#define MLTCP_MAX_JOBS 1024

typedef bit<9>  egressSpec_t;
typedef bit<48> macAddr_t;
typedef bit<32> ip4Addr_t;

error {
    MLTCPBadVersion,
    IPv4BadIHL
}

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

header ipv4_options_t {
    varbit<320> options;  /* (ihl - 5) 32-bit words, at most 10 */
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

/* The MLTCP shim: 12 bytes after UDP (see docs/CONTRACTS.md). */
header mltcp_t {
    bit<4>  version;
    bit<4>  flags;        /* bit0 ACK, bit1 CNP, bit2 ITER_START, bit3 ECE */
    bit<8>  reserved;
    bit<16> job_id;
    bit<32> iteration;
    bit<16> bytes_ratio;  /* Q0.16, 0xFFFF = 1.0 */
    bit<16> reserved2;
}

struct metadata {
    bit<1>  ecn_enabled;
    bit<19> ecn_threshold;
    bit<4>  progress_band;   /* bytes_ratio[15:12] */
    bit<1>  has_progress;    /* a shim or the MLTCP IPv4 option was parsed */
    bit<16> job_id;
    bit<16> bytes_ratio;
    bit<1>  contest_on;      /* progress_contest has an entry for the egress port */
    bit<32> contest_window;  /* its window, microseconds */
}

struct headers {
    ethernet_t     ethernet;
    ipv4_t         ipv4;
    mltcp_ipopt_t  mltcp_ipopt;
    ipv4_options_t ipv4_options;
    tcp_t          tcp;
    udp_t          udp;
    mltcp_t        mltcp;
}

/*************************************************************************
*********************** P A R S E R  ***********************************
*************************************************************************/

parser MyParser(packet_in packet,
                out headers hdr,
                inout metadata meta,
                inout standard_metadata_t standard_metadata) {

    state start {
        transition parse_ethernet;
    }

    state parse_ethernet {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.etherType) {
            TYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }

    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        verify(hdr.ipv4.ihl >= 5, error.IPv4BadIHL);
        transition select(hdr.ipv4.ihl) {
            5: parse_ipv4_l4;
            7: parse_ipv4_ihl7;
            default: parse_ipv4_options;
        }
    }

    state parse_ipv4_ihl7 {
        transition select(packet.lookahead<bit<16>>()) {
            MLTCP_IPOPT: parse_mltcp_ipopt;
            default: parse_ipv4_options;
        }
    }

    state parse_mltcp_ipopt {
        packet.extract(hdr.mltcp_ipopt);
        verify(hdr.mltcp_ipopt.version == MLTCP_VERSION, error.MLTCPBadVersion);
        meta.has_progress = 1;
        meta.job_id = hdr.mltcp_ipopt.job_id;
        meta.bytes_ratio = hdr.mltcp_ipopt.bytes_ratio;
        transition parse_ipv4_l4;
    }

    state parse_ipv4_options {
        packet.extract(hdr.ipv4_options, (bit<32>)(((bit<16>)hdr.ipv4.ihl - 5) * 32));
        transition parse_ipv4_l4;
    }

    state parse_ipv4_l4 {
        transition select(hdr.ipv4.fragOffset, hdr.ipv4.protocol) {
            (0, PROTO_TCP): parse_tcp;
            (0, PROTO_UDP): parse_udp;
            default: accept;
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
        verify(hdr.mltcp.version == MLTCP_VERSION, error.MLTCPBadVersion);
        meta.has_progress = 1;
        meta.job_id = hdr.mltcp.job_id;
        meta.bytes_ratio = hdr.mltcp.bytes_ratio;
        transition accept;
    }
}

/*************************************************************************
************   C H E C K S U M    V E R I F I C A T I O N   *************
*************************************************************************/

control MyVerifyChecksum(inout headers hdr, inout metadata meta) {
    apply { }
}

/*************************************************************************
**************  I N G R E S S   P R O C E S S I N G   *******************
*************************************************************************/

control MyIngress(inout headers hdr,
                  inout metadata meta,
                  inout standard_metadata_t standard_metadata) {

    counter(MLTCP_MAX_JOBS, CounterType.packets_and_bytes) job_tx;
    counter(1, CounterType.packets) parse_errors;
    register<bit<16>>(MLTCP_MAX_JOBS) job_bytes_ratio;

    action drop() {
        mark_to_drop(standard_metadata);
    }

    action ipv4_forward(macAddr_t dstAddr, egressSpec_t port) {
        standard_metadata.egress_spec = port;
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

    /* strict priority by iteration progress (BMv2 --priority-queues: higher is served first) */
    action set_progress_priority(bit<3> priority) {
        standard_metadata.priority = priority;
    }

    table progress_priority {
        key = {
            standard_metadata.egress_spec: exact;
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
        if (standard_metadata.parser_error != error.NoError) {
            parse_errors.count(0);
            drop();
        } else if (hdr.ipv4.isValid()) {
            if (meta.has_progress == 1 && meta.job_id < MLTCP_MAX_JOBS) {
                job_tx.count((bit<32>)meta.job_id);
                job_bytes_ratio.write((bit<32>)meta.job_id, meta.bytes_ratio);
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

/*************************************************************************
****************  E G R E S S   P R O C E S S I N G   *******************
*************************************************************************/

control MyEgress(inout headers hdr,
                 inout metadata meta,
                 inout standard_metadata_t standard_metadata) {

    counter(MLTCP_MAX_JOBS, CounterType.packets) job_ecn_marks;

    /* threshold: queue depth in packets at which ECN-capable packets get CE. */
    action set_ecn_threshold(bit<19> threshold) {
        meta.ecn_enabled = 1;
        meta.ecn_threshold = threshold;
    }

    table ecn_threshold {
        key = {
            standard_metadata.egress_port: exact;
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
       other bands' entries set their thresholds (v1model's enq_qdepth counts every priority queue of the port (BMv2
       --priority-queues), so a threshold here compares with the port's total queue) */
    action no_progress_ecn() {
        meta.ecn_enabled = 0;
    }

    /* contested: another job's packet left this port within the window (us), so the port is
       shared and progress_ecn's per-band thresholds apply; alone, the port's threshold does */
    register<bit<16>>(512) contest_job;    /* last MLTCP job at the port, + 1 (0: none yet) */
    register<bit<48>>(512) contest_seen;   /* when the job last changed there (egress timestamp, us) */

    action set_contest_window(bit<32> window) {
        meta.contest_on = 1;
        meta.contest_window = window;
    }

    table progress_contest {
        key = {
            standard_metadata.egress_port: exact;
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
            standard_metadata.egress_port: exact;
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
        meta.ecn_enabled = 0;
        if (hdr.ipv4.isValid()) {
            ecn_threshold.apply();
            if (meta.has_progress == 1) {
                meta.progress_band = meta.bytes_ratio[15:12];
                meta.contest_on = 0;
                progress_contest.apply();
                bit<1> contested = 1;
                if (meta.contest_on == 1) {
                    bit<32> port = (bit<32>)standard_metadata.egress_port;
                    bit<16> last;
                    bit<48> seen;
                    contest_job.read(last, port);
                    contest_seen.read(seen, port);
                    if (last != 0 && last != meta.job_id + 1) {
                        seen = standard_metadata.egress_global_timestamp;
                        contest_seen.write(port, seen);
                    }
                    contest_job.write(port, meta.job_id + 1);
                    if (standard_metadata.egress_global_timestamp - seen >= (bit<48>)meta.contest_window) {
                        contested = 0;
                    }
                }
                if (contested == 1) {
                    progress_ecn.apply();
                }
            }
            if (meta.ecn_enabled == 1
                    && (hdr.ipv4.ecn == 1 || hdr.ipv4.ecn == 2)
                    && standard_metadata.enq_qdepth >= meta.ecn_threshold) {
                hdr.ipv4.ecn = ECN_CE;
                if (meta.has_progress == 1 && meta.job_id < MLTCP_MAX_JOBS) {
                    job_ecn_marks.count((bit<32>)meta.job_id);
                }
            }
        }
    }
}

/*************************************************************************
*************   C H E C K S U M    C O M P U T A T I O N   **************
*************************************************************************/

control MyComputeChecksum(inout headers hdr, inout metadata meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid(),
            { hdr.ipv4.version,
              hdr.ipv4.ihl,
              hdr.ipv4.diffserv,
              hdr.ipv4.ecn,
              hdr.ipv4.totalLen,
              hdr.ipv4.identification,
              hdr.ipv4.flags,
              hdr.ipv4.fragOffset,
              hdr.ipv4.ttl,
              hdr.ipv4.protocol,
              hdr.ipv4.srcAddr,
              hdr.ipv4.dstAddr,
              hdr.mltcp_ipopt.kind,
              hdr.mltcp_ipopt.len,
              hdr.mltcp_ipopt.version,
              hdr.mltcp_ipopt.flags,
              hdr.mltcp_ipopt.reserved,
              hdr.mltcp_ipopt.job_id,
              hdr.mltcp_ipopt.bytes_ratio,
              hdr.ipv4_options.options },
            hdr.ipv4.hdrChecksum,
            HashAlgorithm.csum16);
    }
}

/*************************************************************************
***********************  D E P A R S E R  *******************************
*************************************************************************/

control MyDeparser(packet_out packet, in headers hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.mltcp_ipopt);
        packet.emit(hdr.ipv4_options);
        packet.emit(hdr.tcp);
        packet.emit(hdr.udp);
        packet.emit(hdr.mltcp);
    }
}

/*************************************************************************
***********************  S W I T C H  *******************************
*************************************************************************/

V1Switch(
    MyParser(),
    MyVerifyChecksum(),
    MyIngress(),
    MyEgress(),
    MyComputeChecksum(),
    MyDeparser()
) main;
