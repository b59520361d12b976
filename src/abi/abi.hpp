// The librdmacm and libibverbs ABI over iwcm::Runtime: what its two halves
// (rdmacm.cpp, verbs.cpp) and the process's runtime (abi.cpp) owe each other.
//
// Read first: include/iwcm/runtime.hpp, docs/design.md "Applications".
// Struct layouts, names and constants are Debian's rdma-core 44 headers
// (<infiniband/verbs.h>, <rdma/rdma_cma.h>), included, never restated.
//
// Locking: every object of the ABI (ids, event channels, contexts, PDs, MRs,
// CQs, QPs, completion channels) is read and changed only under the runtime's
// lock: inside Runtime::call from an application thread, or inside a
// RuntimeHandler callback. A call that blocks (rdma_get_cm_event,
// ibv_get_cq_event, ibv_get_async_event) waits on its eventfd outside the lock
// and takes what it found under it.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cstdint>
#include <optional>
#include <string>

#include "iwcm/runtime.hpp"

namespace iwcm::abi {

// ---- abi.cpp ----
// The process's one runtime, started on first use from RuntimeConfig::from_env()
// with the ABI's handler. nullptr when it cannot start: runtime_error() says why
// (and the first failure is printed once on stderr as "iwcm: <why>").
Runtime* runtime();
const std::string& runtime_error();

// ---- verbs.cpp ----
// The context that rdma_cm ids carry (id->verbs): the runtime's one device,
// opened once and shared, as librdmacm shares its device contexts. nullptr
// without a runtime.
ibv_context* default_context();
// From the handler, with the lock held.
void verbs_on_completion(Session& s, rdma::CqHandle cq, bool solicited);
void verbs_on_qp_event(Session& s, const rdma::QpEvent& e);
// From rdmacm.cpp, with the lock held.
// The connection of a QP made before it (rdma_create_qp, ibv_create_qp) is
// established: make its Device QP on `conn` (rdma::Device::create_qp: the
// negotiated CRC and IRD/ORD come from the core), post the receives that
// waited in it, move it to RTS. 0, or a positive errno; ENOTCONN: the
// connection ended before it could be bound (its end event is queued behind
// the one that established it), the QP is in ERR with its work flushed.
int qp_attach(Session& s, ibv_qp* qp, ConnHandle conn);
// The QP's connection will not come (rejected, unreachable, destroyed before
// established): the QP to ERR, its waiting work flushed.
void qp_abandon(Session& s, ibv_qp* qp);
// The rdma::QpHandle of an attached QP, if it is one of ours and attached.
std::optional<rdma::QpHandle> qp_handle(ibv_qp* qp);

// ---- rdmacm.cpp ----
// From the handler, with the lock held.
void rdmacm_on_event(Session& s, const Event& e);
void rdmacm_on_qp_event(Session& s, const rdma::QpEvent& e);
void rdmacm_on_resolved(Session& s, std::uint64_t token, std::optional<MacAddr> mac,
                        const std::string& error);

}  // namespace iwcm::abi
