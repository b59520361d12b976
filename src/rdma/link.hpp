// The byte link a queue pair's FPDUs travel on: the Core's byte stream (the
// Device), a kernel TCP socket (the benchmark's baseline) or an in-memory
// pipe (unit tests).
//
// Read first: engine.hpp (who calls this), include/iwcm/core.hpp ("byte
// stream": send, peek, consume). One Links object serves every queue pair of
// an Engine; a LinkId names one connection in it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "wire/bytes.hpp"
#include "wire/pieces.hpp"

namespace iwcm::rdma {

struct LinkId {
    std::uint64_t value = 0;
    friend constexpr bool operator==(LinkId, LinkId) = default;
};

class Links {
public:
    virtual ~Links() = default;
    // What send_record() would take now, in bytes.
    virtual std::size_t send_space(LinkId link) = 0;
    // One whole record (one FPDU), all or nothing: false when it does not
    // fit now; the link then reports writable (Engine::on_writable) once
    // space frees.
    virtual bool send_record(LinkId link, wire::Bytes record) = 0;
    // The same record in pieces (an FPDU's header, the payload where it lies
    // in registered memory, the pad and CRC). A link that can gather them
    // into its buffer overrides this; by default they are joined here first.
    // A link may hold such records back until flush() (the engine flushes
    // after each round of sending).
    virtual bool send_record_parts(LinkId link, std::span<const wire::Bytes> parts) {
        joined_.clear();
        wire::append(joined_, parts);
        return send_record(link, joined_);
    }
    // The same, with the parts whose bit is set in `by_ref` (part i: bit
    // i) lying in registered memory that the link may send, and resend, from
    // where they are instead of copying them (docs/perf.md "Copies"). A link
    // that does so overrides ack_mark and own_refs too; by default the parts
    // are copied (send_record_parts).
    virtual bool send_record_ref(LinkId link, std::span<const wire::Bytes> parts,
                                 std::uint32_t by_ref) {
        (void)by_ref;
        return send_record_parts(link, parts);
    }
    // A link that holds bytes by reference: the count its acknowledgements
    // (Engine::on_acked) must reach for every record taken so far to be
    // acknowledged; a message is complete only then, since until then its
    // memory may be read again. Nullopt: the link copies, and a message is
    // complete once taken.
    virtual std::optional<std::uint64_t> ack_mark(LinkId) { return std::nullopt; }
    // Copies whatever the link holds by reference (a region is about to go).
    virtual void own_refs(LinkId) {}
    // Sends what send_record_parts held back.
    virtual void flush(LinkId) {}
    // All received bytes not yet consumed.
    virtual std::size_t readable(LinkId link) = 0;
    // The oldest received bytes (a prefix of them when a ring wraps). The
    // view is valid until the next call on this object.
    virtual wire::Bytes peek(LinkId link) = 0;
    virtual void consume(LinkId link, std::size_t n) = 0;
    // Ends the connection: graceful after the bytes already sent, or abortive.
    virtual void close(LinkId link, bool abortive) = 0;
    // Whether records may still be queued: false once our side of the link
    // closed (our FIN is queued; a peer's FIN makes the core queue ours).
    virtual bool send_open(LinkId) { return true; }

private:
    std::vector<std::byte> joined_;
};

}  // namespace iwcm::rdma
