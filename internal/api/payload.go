package api

// SubjectPayload is the history service's NATS endpoint that reads an offloaded payload
// (docs/large-payloads.md) for clients, which do not touch the FLOW_PAYLOADS object store
// themselves: flow.Client.Payload asks it page by page. A payload the store does not hold is an
// error reply with CodeNotFound; one whose stored bytes do not match the reference's hash and
// size is CodeInternal.
const SubjectPayload = "flow.api.payloads.get"

// PayloadRequest asks for the bytes of an offloaded payload from Offset on.
type PayloadRequest struct {
	// SHA256 is the payload's SHA-256, 64 lowercase hex digits (payload.Ref.SHA256).
	SHA256 string `json:"sha256"`
	// Size is the payload's length in bytes (payload.Ref.Size).
	Size int64 `json:"size"`
	// Offset is the first byte wanted; 0 starts at the beginning. It is at most Size.
	Offset int64 `json:"offset,omitempty"`
}

// PayloadResponse is a page of an offloaded payload: the bytes from the request's Offset on that
// fit in one reply (base64 in JSON within the server's max_payload), read from a stored object that the service checked against the
// reference's hash and size. The caller asks again from Offset+len(Data) until it holds Size
// bytes, and checks the whole against the hash itself.
type PayloadResponse struct {
	Data []byte `json:"data"`
}
