// The libibverbs half of libiwcm_rdma (src/abi/verbs*.cpp), called as a
// program calls libibverbs: through <infiniband/verbs.h>, this binary linked
// to the shared library itself.
//
// What needs no connection: the device list and queries, the lifetimes of
// PDs, MRs, channels and CQs (EBUSY while used), QP limits, receives that wait
// in a QP before its connection, modify_qp to ERR and its flushed completions,
// notification through a completion channel, stale and foreign pointers, the
// context's ops table, and the library's symbol versions against Debian's
// libibverbs.
//
// The process's runtime starts on first use from IWCM_TAP / IWCM_IP; the
// environment below makes a network namespace of the process's own first
// (unshare(2): it needs root) so that the TAP device lives and dies there.
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

constexpr const char* kTap = "iwv0";
// The runtime's own MAC on the TAP device (IWCM_MAC): the GID and GUID come from it.
constexpr const char* kMacText = "02:11:22:33:44:55";
constexpr std::array<std::uint8_t, 6> kMac{0x02, 0x11, 0x22, 0x33, 0x44, 0x55};

int sh(const std::string& cmd) {
    int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

class NetnsEnvironment : public ::testing::Environment {
public:
    void SetUp() override {
        ASSERT_EQ(::geteuid(), 0u) << "needs root: the test makes a network namespace and a TAP "
                                      "device for the runtime";
        ASSERT_EQ(::unshare(CLONE_NEWNET), 0) << "unshare(CLONE_NEWNET)";
        ASSERT_EQ(sh("ip link set lo up"), 0);
        ::setenv("IWCM_TAP", kTap, 1);
        ::setenv("IWCM_IP", "10.77.0.1/24", 1);
        ::setenv("IWCM_MAC", kMacText, 1);
    }
};

const auto* const g_env = ::testing::AddGlobalTestEnvironment(new NetnsEnvironment);

// The TAP device's MTU, asked of the kernel in our namespace
// (sysfs shows the namespace that mounted it).
ifreq query_tap(unsigned long request) {
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", kTap);
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::ioctl(fd, request, &ifr), 0) << kTap << ": " << std::strerror(errno);
    ::close(fd);
    return ifr;
}

int tap_mtu() {
    return query_tap(SIOCGIFMTU).ifr_mtu;
}

ibv_wc_status status_of(const ibv_wc& wc) {
    return wc.status;
}

// A context on the one device, a PD and a CQ on a channel.
class Verbs : public ::testing::Test {
protected:
    void SetUp() override {
        int n = -1;
        list_ = ibv_get_device_list(&n);
        ASSERT_NE(list_, nullptr);
        ASSERT_EQ(n, 1) << "the runtime did not start: no device";
        ctx_ = ibv_open_device(list_[0]);
        ASSERT_NE(ctx_, nullptr) << std::strerror(errno);
        pd_ = ibv_alloc_pd(ctx_);
        ASSERT_NE(pd_, nullptr);
        channel_ = ibv_create_comp_channel(ctx_);
        ASSERT_NE(channel_, nullptr);
        cq_ = ibv_create_cq(ctx_, 16, this, channel_, 0);
        ASSERT_NE(cq_, nullptr);
        mr_ = ibv_reg_mr(pd_, buf_.data(), buf_.size(),
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
        ASSERT_NE(mr_, nullptr);
    }

    void TearDown() override {
        for (ibv_qp* qp : qps_) {
            EXPECT_EQ(ibv_destroy_qp(qp), 0);
        }
        if (mr_ != nullptr) {
            EXPECT_EQ(ibv_dereg_mr(mr_), 0);
        }
        if (cq_ != nullptr) {
            EXPECT_EQ(ibv_destroy_cq(cq_), 0);
        }
        if (channel_ != nullptr) {
            EXPECT_EQ(ibv_destroy_comp_channel(channel_), 0);
        }
        if (pd_ != nullptr) {
            EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
        }
        if (ctx_ != nullptr) {
            EXPECT_EQ(ibv_close_device(ctx_), 0);
        }
        if (list_ != nullptr) ibv_free_device_list(list_);
    }

    ibv_qp_init_attr rc_attr() {
        ibv_qp_init_attr a{};
        a.send_cq = cq_;
        a.recv_cq = cq_;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = 8;
        a.cap.max_recv_wr = 8;
        a.cap.max_send_sge = 2;
        a.cap.max_recv_sge = 2;
        return a;
    }

    ibv_qp* make_qp() {
        ibv_qp_init_attr a = rc_attr();
        ibv_qp* qp = ibv_create_qp(pd_, &a);
        EXPECT_NE(qp, nullptr) << std::strerror(errno);
        if (qp != nullptr) qps_.push_back(qp);
        return qp;
    }

    int post_recv(ibv_qp* qp, std::uint64_t wr_id, std::uint32_t offset = 0,
                  std::uint32_t lkey = 0) {
        ibv_sge sge{reinterpret_cast<std::uintptr_t>(buf_.data()) + offset, 64,
                    lkey != 0 ? lkey : mr_->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = wr_id;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        return ibv_post_recv(qp, &wr, &bad);
    }

    int to_state(ibv_qp* qp, ibv_qp_state state) {
        ibv_qp_attr attr{};
        attr.qp_state = state;
        return ibv_modify_qp(qp, &attr, IBV_QP_STATE);
    }

    std::vector<ibv_wc> poll_all() {
        std::vector<ibv_wc> out;
        ibv_wc wc[4];
        int n = 0;
        while ((n = ibv_poll_cq(cq_, 4, wc)) > 0) out.insert(out.end(), wc, wc + n);
        EXPECT_EQ(n, 0);
        return out;
    }

    ibv_device** list_ = nullptr;
    ibv_context* ctx_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_comp_channel* channel_ = nullptr;
    ibv_cq* cq_ = nullptr;
    ibv_mr* mr_ = nullptr;
    std::vector<ibv_qp*> qps_;
    std::array<char, 4096> buf_{};
};

// ---------------------------------------------------------------- the device

TEST_F(Verbs, OneIwarpDeviceNamedAfterTheLibrary) {
    ibv_device* dev = list_[0];
    EXPECT_EQ(list_[1], nullptr);
    EXPECT_STREQ(ibv_get_device_name(dev), "iwcm0");
    EXPECT_EQ(dev->node_type, IBV_NODE_RNIC);
    EXPECT_EQ(dev->transport_type, IBV_TRANSPORT_IWARP);
    // The GUID is the runtime's MAC as a modified EUI-64.
    const auto& mac = kMac;
    __be64 guid = ibv_get_device_guid(dev);
    auto* g = reinterpret_cast<const std::uint8_t*>(&guid);
    EXPECT_EQ(g[0], mac[0] ^ 0x02);
    EXPECT_EQ(g[3], 0xff);
    EXPECT_EQ(g[4], 0xfe);
    EXPECT_EQ(g[7], mac[5]);
    ibv_device fake{};
    EXPECT_EQ(ibv_open_device(&fake), nullptr);
    EXPECT_EQ(errno, EINVAL);
}

TEST_F(Verbs, ContextOpsTableIsFilledAndNotExtended) {
    EXPECT_NE(ctx_->ops.poll_cq, nullptr);
    EXPECT_NE(ctx_->ops.req_notify_cq, nullptr);
    EXPECT_NE(ctx_->ops.post_send, nullptr);
    EXPECT_NE(ctx_->ops.post_recv, nullptr);
    EXPECT_EQ(ctx_->num_comp_vectors, 1);
    EXPECT_GE(ctx_->async_fd, 0);
    // Non-extended: the header's inline helpers fall back to the plain calls.
    ibv_device_attr_ex ex{};
    ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &ex), 0);
    EXPECT_EQ(ex.orig_attr.max_sge, 6);
    ibv_qp_init_attr_ex qx{};
    qx.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qx.pd = pd_;
    qx.send_cq = qx.recv_cq = cq_;
    qx.qp_type = IBV_QPT_RC;
    qx.send_ops_flags = IBV_QP_EX_WITH_SEND;
    EXPECT_EQ(ibv_create_qp_ex(ctx_, &qx), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(Verbs, QueryDeviceGivesTheDevicesLimits) {
    ibv_device_attr a{};
    ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
    EXPECT_EQ(a.max_sge, 6);
    EXPECT_EQ(a.max_sge_rd, 6);  // a Read Request per sink
    EXPECT_EQ(a.max_mw, 4096);
    EXPECT_EQ(a.device_cap_flags & (IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B),
              IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B);
    EXPECT_EQ(a.max_qp_wr, 65536);
    EXPECT_EQ(a.max_cqe, 1 << 22);
    EXPECT_EQ(a.max_qp_rd_atom, 128);
    EXPECT_EQ(a.max_qp_init_rd_atom, 128);
    EXPECT_EQ(a.phys_port_cnt, 1);
    EXPECT_EQ(a.atomic_cap, IBV_ATOMIC_NONE);
    EXPECT_EQ(a.max_srq, 1024);
    EXPECT_EQ(a.max_srq_wr, 65536);
    EXPECT_EQ(a.max_srq_sge, 6);
    EXPECT_EQ(a.node_guid, ibv_get_device_guid(list_[0]));
}

TEST_F(Verbs, QueryPortReportsAnActiveEthernetPort) {
    ibv_port_attr p{};
    ASSERT_EQ(ibv_query_port(ctx_, 1, &p), 0);
    EXPECT_EQ(p.state, IBV_PORT_ACTIVE);
    EXPECT_EQ(p.link_layer, IBV_LINK_LAYER_ETHERNET);
    EXPECT_EQ(p.gid_tbl_len, 1);
    EXPECT_EQ(p.max_msg_sz, 1u << 31);
    // The interface's MTU as the largest IB MTU it holds.
    int mtu = tap_mtu();
    ibv_mtu want = mtu >= 4096 ? IBV_MTU_4096 : mtu >= 2048 ? IBV_MTU_2048 : IBV_MTU_1024;
    EXPECT_EQ(p.active_mtu, want);
    EXPECT_EQ(ibv_query_port(ctx_, 2, &p), EINVAL);
}

TEST_F(Verbs, GidIsTheMacAsSiwReportsIt) {
    const auto& mac = kMac;
    ibv_gid gid{};
    ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &gid), 0);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(gid.raw[i], mac[i]) << i;
    for (int i = 6; i < 16; ++i) EXPECT_EQ(gid.raw[i], 0) << i;
    EXPECT_EQ(ibv_query_gid(ctx_, 1, 1, &gid), -1);
    EXPECT_EQ(errno, EINVAL);
    ibv_gid_entry e{};
    ASSERT_EQ(ibv_query_gid_ex(ctx_, 1, 0, &e, 0), 0);
    EXPECT_EQ(std::memcmp(e.gid.raw, gid.raw, 16), 0);
    EXPECT_EQ(e.port_num, 1u);
    EXPECT_EQ(e.ndev_ifindex, ::if_nametoindex(kTap));
    EXPECT_EQ(ibv_query_gid_ex(ctx_, 1, 3, &e, 0), ENODATA);
    __be16 pkey = 0;
    ASSERT_EQ(ibv_query_pkey(ctx_, 1, 0, &pkey), 0);
    EXPECT_EQ(pkey, 0xffff);
}

// ---------------------------------------------------------------- PDs and MRs

TEST_F(Verbs, PdIsBusyWhileAnMrUsesIt) {
    ibv_pd* pd = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd, nullptr);
    ibv_mr* mr = ibv_reg_mr(pd, buf_.data(), 100, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(mr->lkey, mr->rkey);
    EXPECT_EQ(mr->pd, pd);
    EXPECT_EQ(mr->addr, buf_.data());
    EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
    EXPECT_EQ(ibv_close_device(ctx_), -1);  // the context still holds it
    EXPECT_EQ(errno, EBUSY);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_dereg_mr(mr), EINVAL);  // stale
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), EINVAL);  // stale
}

// ibv_alloc_mw makes type 2 windows only; a bind is checked at post for what the ABI can
// tell (the window and region are ours, 32-bit length, remote rights only) and, like any
// send, is ENOTCONN before the connection; the PD is busy while a window lives.
TEST_F(Verbs, MemoryWindowCalls) {
    errno = 0;
    EXPECT_EQ(ibv_alloc_mw(pd_, IBV_MW_TYPE_1), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    errno = 0;
    EXPECT_EQ(ibv_alloc_mw(pd_, static_cast<ibv_mw_type>(3)), nullptr);
    EXPECT_EQ(errno, EINVAL);
    ibv_pd* pd = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd, nullptr);
    ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    ASSERT_NE(mw, nullptr);
    EXPECT_EQ(mw->type, IBV_MW_TYPE_2);
    EXPECT_EQ(mw->pd, pd);
    EXPECT_EQ(mw->context, ctx_);
    EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    ibv_mw_bind type1{};
    EXPECT_EQ(ibv_bind_mw(qp, mw, &type1), EINVAL);  // type 2 binds through the send queue
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_BIND_MW;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
    wr.bind_mw.bind_info.mr = mr_;
    wr.bind_mw.bind_info.addr = reinterpret_cast<std::uintptr_t>(buf_.data());
    wr.bind_mw.bind_info.length = 64;
    ibv_send_wr* bad = nullptr;
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_ATOMIC;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
    wr.bind_mw.bind_info.length = 1ull << 32;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
    wr.bind_mw.bind_info.length = 64;
    wr.bind_mw.bind_info.mr = nullptr;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
    wr.bind_mw.bind_info.mr = mr_;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), ENOTCONN);
    EXPECT_EQ(ibv_dealloc_mw(mw), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(Verbs, RegMrRefusesWhatTheDeviceCannotHonour) {
    // Remote write without local write (as the kernel's ib_check_mr_access).
    EXPECT_EQ(ibv_reg_mr(pd_, buf_.data(), 64, IBV_ACCESS_REMOTE_WRITE), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_reg_mr(pd_, buf_.data(), 0, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_reg_mr(pd_, buf_.data(), 64, IBV_ACCESS_ZERO_BASED), nullptr);
    EXPECT_EQ(errno, EINVAL);
    // The tagged offsets are the addresses: another iova is refused.
    auto addr = reinterpret_cast<std::uintptr_t>(buf_.data());
    EXPECT_EQ(ibv_reg_mr_iova2(pd_, buf_.data(), 64, addr + 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EINVAL);
    ibv_mr* mr = ibv_reg_mr_iova2(pd_, buf_.data(), 64, addr, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    ibv_pd foreign{};
    foreign.context = ctx_;
    EXPECT_EQ(ibv_reg_mr(&foreign, buf_.data(), 64, IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_EQ(errno, EINVAL);
}

// ---------------------------------------------------------------- channels and CQs

TEST_F(Verbs, ChannelIsAnEventfdBusyWhileACqUsesIt) {
    char link[64] = {};
    std::string fd_path = "/proc/self/fd/" + std::to_string(channel_->fd);
    ASSERT_GT(::readlink(fd_path.c_str(), link, sizeof link - 1), 0);
    EXPECT_STREQ(link, "anon_inode:[eventfd]");
    EXPECT_EQ(ibv_destroy_comp_channel(channel_), EBUSY);
    ASSERT_EQ(ibv_destroy_cq(cq_), 0);
    cq_ = nullptr;
    EXPECT_EQ(ibv_destroy_comp_channel(channel_), 0);
    EXPECT_EQ(ibv_destroy_comp_channel(channel_), EINVAL);
    channel_ = nullptr;
}

TEST_F(Verbs, CreateCqChecksItsArguments) {
    EXPECT_EQ(ibv_create_cq(ctx_, 0, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_create_cq(ctx_, (1 << 22) + 1, nullptr, nullptr, 0), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_create_cq(ctx_, 4, nullptr, nullptr, 1), nullptr);  // one vector
    EXPECT_EQ(errno, EINVAL);
    ibv_cq* cq = ibv_create_cq(ctx_, 100, nullptr, nullptr, 0);
    ASSERT_NE(cq, nullptr);
    EXPECT_GE(cq->cqe, 100);
    ibv_wc wc;
    EXPECT_EQ(ibv_poll_cq(cq, 1, &wc), 0);
    EXPECT_EQ(ibv_destroy_cq(cq), 0);
    EXPECT_LT(ibv_poll_cq(cq, 1, &wc), 0);  // stale
    EXPECT_EQ(ibv_req_notify_cq(cq, 0), EINVAL);
    EXPECT_EQ(ibv_destroy_cq(cq), EINVAL);
}

// ---------------------------------------------------------------- QPs

TEST_F(Verbs, CreateQpChecksTheLimits) {
    ibv_qp_init_attr a = rc_attr();
    a.cap.max_send_wr = 65537;
    EXPECT_EQ(ibv_create_qp(pd_, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    a = rc_attr();
    a.cap.max_recv_sge = 7;
    EXPECT_EQ(ibv_create_qp(pd_, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    a = rc_attr();
    a.cap.max_inline_data = 257;
    EXPECT_EQ(ibv_create_qp(pd_, &a), nullptr);
    EXPECT_EQ(errno, EINVAL);
    a = rc_attr();
    a.qp_type = IBV_QPT_UD;
    EXPECT_EQ(ibv_create_qp(pd_, &a), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    a = rc_attr();
    a.cap.max_inline_data = 256;
    ibv_qp* qp = ibv_create_qp(pd_, &a);
    ASSERT_NE(qp, nullptr);
    qps_.push_back(qp);
    EXPECT_EQ(a.cap.max_inline_data, 256u);  // written back
    EXPECT_EQ(qp->state, IBV_QPS_RESET);
    EXPECT_EQ(qp->qp_type, IBV_QPT_RC);
    ibv_qp* other = make_qp();
    ASSERT_NE(other, nullptr);
    EXPECT_NE(qp->qp_num, other->qp_num);
    // What a QP uses is busy.
    EXPECT_EQ(ibv_destroy_cq(cq_), EBUSY);
    EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);
}

TEST_F(Verbs, StatesBeforeTheConnection) {
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(to_state(qp, IBV_QPS_RTR), EINVAL);  // RESET -> RTR
    EXPECT_EQ(to_state(qp, IBV_QPS_INIT), 0);
    EXPECT_EQ(to_state(qp, IBV_QPS_RTR), 0);
    // Only the connection brings a QP to RTS; SQD needs one too.
    EXPECT_EQ(to_state(qp, IBV_QPS_RTS), EINVAL);
    EXPECT_EQ(to_state(qp, IBV_QPS_SQD), EINVAL);
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    ASSERT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE | IBV_QP_CAP, &init), 0);
    EXPECT_EQ(attr.qp_state, IBV_QPS_RTR);
    EXPECT_EQ(attr.cap.max_send_wr, 8u);
    EXPECT_EQ(init.send_cq, cq_);
    EXPECT_EQ(init.qp_type, IBV_QPT_RC);
    // A send before the connection: ENOTCONN, as siw_post_send before RTS.
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buf_.data()), 8, mr_->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), ENOTCONN);
    EXPECT_EQ(bad, &wr);
    // Opcodes the device has not: EINVAL.
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), EINVAL);
}

TEST_F(Verbs, ReceivesWaitAndFlushInOrderOnError) {
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    ASSERT_EQ(to_state(qp, IBV_QPS_INIT), 0);
    // A list: the second names a region of another PD and stops the list there.
    ibv_pd* pd2 = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd2, nullptr);
    ibv_mr* mr2 = ibv_reg_mr(pd2, buf_.data(), 256, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr2, nullptr);
    ibv_sge good{reinterpret_cast<std::uintptr_t>(buf_.data()), 64, mr_->lkey};
    ibv_sge foreign{reinterpret_cast<std::uintptr_t>(buf_.data()), 64, mr2->lkey};
    ibv_recv_wr w[3]{};
    w[0] = {10, &w[1], &good, 1};
    w[1] = {11, &w[2], &foreign, 1};
    w[2] = {12, nullptr, &good, 1};
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_recv(qp, w, &bad), EINVAL);
    EXPECT_EQ(bad, &w[1]);
    EXPECT_EQ(post_recv(qp, 13), 0);
    // Outside the region: refused.
    EXPECT_EQ(post_recv(qp, 99, 4096 - 32), EINVAL);
    EXPECT_TRUE(poll_all().empty()) << "a waiting receive completed";
    // Arm for a notification, then move to ERR: the waiting receives flush.
    ASSERT_EQ(ibv_req_notify_cq(cq_, 0), 0);
    ASSERT_EQ(to_state(qp, IBV_QPS_ERR), 0);
    EXPECT_EQ(qp->state, IBV_QPS_ERR);
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    ASSERT_EQ(ibv_get_cq_event(channel_, &ev_cq, &ev_ctx), 0);
    EXPECT_EQ(ev_cq, cq_);
    EXPECT_EQ(ev_ctx, this);
    ibv_ack_cq_events(cq_, 1);
    auto wcs = poll_all();
    ASSERT_EQ(wcs.size(), 2u);
    EXPECT_EQ(wcs[0].wr_id, 10u);
    EXPECT_EQ(wcs[1].wr_id, 13u);
    for (const ibv_wc& wc : wcs) {
        EXPECT_EQ(status_of(wc), IBV_WC_WR_FLUSH_ERR);
        EXPECT_EQ(wc.opcode, IBV_WC_RECV);
        EXPECT_EQ(wc.qp_num, qp->qp_num);
    }
    EXPECT_EQ(ibv_dereg_mr(mr2), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
}

TEST_F(Verbs, WorkPostedInErrorFlushesAtOnceWithOneEventPerArm) {
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    ASSERT_EQ(to_state(qp, IBV_QPS_ERR), 0);
    int flags = ::fcntl(channel_->fd, F_GETFL);
    ASSERT_EQ(::fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK), 0);
    ibv_cq* ev_cq = nullptr;
    void* ev_ctx = nullptr;
    // Not armed: a completion raises no event.
    ASSERT_EQ(post_recv(qp, 1), 0);
    EXPECT_EQ(ibv_get_cq_event(channel_, &ev_cq, &ev_ctx), -1);
    EXPECT_EQ(errno, EAGAIN);
    // Armed solicited-only: an error completion still wakes it, once.
    ASSERT_EQ(ibv_req_notify_cq(cq_, 1), 0);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buf_.data()), 8, mr_->lkey};
    ibv_send_wr s[2]{};
    s[0].wr_id = 2;
    s[0].opcode = IBV_WR_RDMA_WRITE;
    s[0].sg_list = &sge;
    s[0].num_sge = 1;
    s[0].next = &s[1];
    s[1] = s[0];
    s[1].wr_id = 3;
    s[1].next = nullptr;
    ibv_send_wr* bad = nullptr;
    ASSERT_EQ(ibv_post_send(qp, s, &bad), 0);
    ASSERT_EQ(ibv_get_cq_event(channel_, &ev_cq, &ev_ctx), 0);
    EXPECT_EQ(ev_cq, cq_);
    EXPECT_EQ(ibv_get_cq_event(channel_, &ev_cq, &ev_ctx), -1);
    EXPECT_EQ(errno, EAGAIN);
    ibv_ack_cq_events(cq_, 1);
    auto wcs = poll_all();
    ASSERT_EQ(wcs.size(), 3u);
    EXPECT_EQ(wcs[0].wr_id, 1u);
    EXPECT_EQ(wcs[0].opcode, IBV_WC_RECV);
    EXPECT_EQ(wcs[1].wr_id, 2u);
    EXPECT_EQ(wcs[1].opcode, IBV_WC_RDMA_WRITE);
    EXPECT_EQ(wcs[2].wr_id, 3u);
    for (const ibv_wc& wc : wcs) EXPECT_EQ(status_of(wc), IBV_WC_WR_FLUSH_ERR);
}

TEST_F(Verbs, ReceiveQueueDepthHoldsInTheShell) {
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(post_recv(qp, i), 0) << i;
    EXPECT_EQ(post_recv(qp, 8), ENOMEM);
    ASSERT_EQ(to_state(qp, IBV_QPS_ERR), 0);
    EXPECT_EQ(poll_all().size(), 8u);
}

TEST_F(Verbs, StaleAndForeignPointersAreRefused) {
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    ASSERT_EQ(ibv_destroy_qp(qp), 0);
    qps_.clear();
    EXPECT_EQ(ibv_destroy_qp(qp), EINVAL);
    EXPECT_EQ(to_state(qp, IBV_QPS_ERR), EINVAL);
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_recv(qp, &wr, &bad), EINVAL);
    // Objects this library never issued, with a real context inside.
    ibv_qp fake_qp{};
    fake_qp.context = ctx_;
    ibv_send_wr swr{};
    ibv_send_wr* sbad = nullptr;
    EXPECT_EQ(ctx_->ops.post_send(&fake_qp, &swr, &sbad), EINVAL);
    ibv_cq fake_cq{};
    fake_cq.context = ctx_;
    ibv_wc wc;
    EXPECT_LT(ctx_->ops.poll_cq(&fake_cq, 1, &wc), 0);
    ibv_context fake_ctx{};
    EXPECT_EQ(ibv_alloc_pd(&fake_ctx), nullptr);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(ibv_close_device(&fake_ctx), -1);
    ibv_async_event ev{};
    EXPECT_EQ(ibv_get_async_event(&fake_ctx, &ev), -1);
    EXPECT_EQ(errno, EINVAL);
    ibv_comp_channel fake_ch{};
    ibv_cq* cq = nullptr;
    void* cq_ctx = nullptr;
    EXPECT_EQ(ibv_get_cq_event(&fake_ch, &cq, &cq_ctx), -1);
    EXPECT_EQ(errno, EINVAL);
}

TEST_F(Verbs, AsyncFdHonoursNonBlocking) {
    int flags = ::fcntl(ctx_->async_fd, F_GETFL);
    ASSERT_EQ(::fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
    ibv_async_event ev{};
    EXPECT_EQ(ibv_get_async_event(ctx_, &ev), -1);
    EXPECT_EQ(errno, EAGAIN);
}

// ibv_create_srq(3) and its calls: limits checked, receives posted within the SRQ's PD,
// the limit armed and read back, a QP made on it takes no receive of its own, and an SRQ
// a QP uses cannot be destroyed.
TEST_F(Verbs, SharedReceiveQueueCalls) {
    ibv_srq_init_attr init{};
    init.attr = {65537, 1, 0};
    EXPECT_EQ(ibv_create_srq(pd_, &init), nullptr);
    EXPECT_EQ(errno, EINVAL);
    init.attr = {4, 7, 0};
    EXPECT_EQ(ibv_create_srq(pd_, &init), nullptr);
    init.attr = {4, 1, 5};  // a limit above max_wr
    EXPECT_EQ(ibv_create_srq(pd_, &init), nullptr);
    init.attr = {4, 1, 2};
    ibv_srq* srq = ibv_create_srq(pd_, &init);
    ASSERT_NE(srq, nullptr);
    EXPECT_EQ(srq->pd, pd_);
    ibv_srq_attr got{};
    ASSERT_EQ(ibv_query_srq(srq, &got), 0);
    EXPECT_EQ(got.max_wr, 4u);
    EXPECT_EQ(got.max_sge, 1u);
    EXPECT_EQ(got.srq_limit, 2u);
    std::vector<char> buf(64);
    ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr, nullptr);
    ibv_sge sge{reinterpret_cast<std::uintptr_t>(buf.data()), 16, mr->lkey};
    ibv_recv_wr wrs[5];
    for (int i = 0; i < 5; ++i)
        wrs[i] = {static_cast<std::uint64_t>(i), i < 4 ? &wrs[i + 1] : nullptr, &sge, 1};
    ibv_recv_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_srq_recv(srq, wrs, &bad), ENOMEM);  // the fifth finds it full
    EXPECT_EQ(bad, &wrs[4]);
    ibv_sge outside{reinterpret_cast<std::uintptr_t>(buf.data()) + 60, 16, mr->lkey};
    ibv_recv_wr one{9, nullptr, &outside, 1};
    EXPECT_EQ(ibv_post_srq_recv(srq, &one, &bad), EINVAL);
    ibv_srq_attr arm{};
    arm.srq_limit = 1;
    EXPECT_EQ(ibv_modify_srq(srq, &arm, IBV_SRQ_LIMIT), 0);
    ASSERT_EQ(ibv_query_srq(srq, &got), 0);
    EXPECT_EQ(got.srq_limit, 1u);
    arm.max_wr = 8;
    EXPECT_EQ(ibv_modify_srq(srq, &arm, IBV_SRQ_MAX_WR), EINVAL);  // no resizing
    ibv_qp_init_attr qa = rc_attr();
    qa.srq = srq;
    ibv_qp* qp = ibv_create_qp(pd_, &qa);
    ASSERT_NE(qp, nullptr);
    EXPECT_EQ(qp->srq, srq);
    ibv_recv_wr own{1, nullptr, &sge, 1};
    EXPECT_EQ(ibv_post_recv(qp, &own, &bad), EINVAL);  // its receives are the SRQ's
    // Moved to ERR, the QP takes no more of the SRQ's receives: QP_LAST_WQE_REACHED, the
    // event a program waits for before it destroys the QP. Once: ERR again raises nothing.
    ibv_qp_attr to_err{};
    to_err.qp_state = IBV_QPS_ERR;
    ASSERT_EQ(ibv_modify_qp(qp, &to_err, IBV_QP_STATE), 0);
    const int flags = ::fcntl(ctx_->async_fd, F_GETFL);
    ASSERT_EQ(::fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
    ibv_async_event ev{};
    ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
    EXPECT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
    EXPECT_EQ(ev.element.qp, qp);
    ibv_ack_async_event(&ev);
    ASSERT_EQ(ibv_modify_qp(qp, &to_err, IBV_QP_STATE), 0);
    EXPECT_EQ(ibv_get_async_event(ctx_, &ev), -1);
    EXPECT_EQ(errno, EAGAIN);
    ASSERT_EQ(::fcntl(ctx_->async_fd, F_SETFL, flags), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), EBUSY);
    EXPECT_EQ(ibv_destroy_qp(qp), 0);
    EXPECT_EQ(ibv_destroy_srq(srq), 0);
    EXPECT_EQ(ibv_query_srq(srq, &got), EINVAL);
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(Verbs, WhatIwarpLacksIsNotSupported) {
    ibv_ah_attr ah{};
    EXPECT_EQ(ibv_create_ah(pd_, &ah), nullptr);
    EXPECT_EQ(errno, EOPNOTSUPP);
    ibv_qp* qp = make_qp();
    ASSERT_NE(qp, nullptr);
    ibv_gid gid{};
    EXPECT_EQ(ibv_attach_mcast(qp, &gid, 0), EOPNOTSUPP);
    EXPECT_EQ(ibv_qp_to_qp_ex(qp), nullptr);
}

// ---------------------------------------------------------------- symbol versions

// name -> version of the default (non-hidden) IBVERBS_* definitions.
std::map<std::string, std::string> ibverbs_symbols(const std::string& lib) {
    std::map<std::string, std::string> out;
    std::string cmd = "objdump -T " + lib;
    FILE* p = ::popen(cmd.c_str(), "r");
    EXPECT_NE(p, nullptr) << cmd;
    if (p == nullptr) return out;
    char line[512];
    while (std::fgets(line, sizeof line, p) != nullptr) {
        std::string s(line);
        if (s.find("*UND*") != std::string::npos) continue;
        char version[64] = {};
        char name[256] = {};
        // "... DF .text <size>  IBVERBS_1.1 ibv_alloc_pd"; a hidden one is "(IBVERBS_1.0)".
        auto at = s.find(" IBVERBS_");
        if (at == std::string::npos) continue;
        if (std::sscanf(s.c_str() + at, " %63s %255s", version, name) == 2) out[name] = version;
    }
    EXPECT_EQ(::pclose(p), 0) << cmd;
    return out;
}

TEST(VerbsSymbols, VersionsAreDebians) {
    auto ours = ibverbs_symbols(IWCM_RDMA_LIB);
    auto debian = ibverbs_symbols(IWCM_DEBIAN_IBVERBS);
    ASSERT_FALSE(debian.empty()) << IWCM_DEBIAN_IBVERBS;
    for (const auto& [name, version] : ours) {
        auto it = debian.find(name);
        ASSERT_NE(it, debian.end()) << name << " is not Debian's";
        EXPECT_EQ(version, it->second) << name;
    }
    // What Debian's rping, ucmatose, cmtime, rdma_server, rdma_client and
    // perftest's ib_* programs import from libibverbs.
    const char* imported[] = {"ibv_create_comp_channel",
                              "ibv_destroy_comp_channel",
                              "ibv_ack_cq_events",
                              "ibv_alloc_pd",
                              "ibv_attach_mcast",
                              "ibv_close_device",
                              "ibv_create_ah",
                              "ibv_create_ah_from_wc",
                              "ibv_create_cq",
                              "ibv_create_qp",
                              "ibv_create_srq",
                              "ibv_dealloc_pd",
                              "ibv_dereg_mr",
                              "ibv_destroy_ah",
                              "ibv_destroy_cq",
                              "ibv_destroy_qp",
                              "ibv_destroy_srq",
                              "ibv_detach_mcast",
                              "ibv_get_cq_event",
                              "ibv_get_device_list",
                              "ibv_get_device_name",
                              "ibv_modify_qp",
                              "ibv_open_device",
                              "ibv_query_device",
                              "ibv_query_gid",
                              "ibv_query_pkey",
                              "ibv_query_port",
                              "ibv_query_qp",
                              "ibv_reg_mr",
                              "_ibv_query_gid_ex",
                              "ibv_qp_to_qp_ex",
                              "ibv_reg_mr_iova2",
                              "ibv_get_async_event",
                              "ibv_ack_async_event",
                              "ibv_free_device_list"};
    for (const char* name : imported) {
        EXPECT_TRUE(ours.count(name)) << name << " is not exported";
    }
}

}  // namespace
