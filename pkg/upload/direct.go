package upload

import "time"

// Direct uploads (docs/artifacts.md): with a store that can presign, the
// sidecar asks the binding server to authorize an object, PUTs the body
// straight to the store through a short-lived presigned URL (for a pending
// key), and asks the server to commit it: the server checks the stored
// object against what was authorized and claimed and promotes it.
const (
	// PathAuthorize is the binding server's endpoint that authorizes one
	// object (POST, JSON AuthorizeRequest → AuthorizeResponse).
	PathAuthorize = "/v1/artifacts/authorize"
	// PathCommit verifies and promotes a directly uploaded object (POST,
	// JSON CommitRequest → CommitResponse).
	PathCommit = "/v1/artifacts/commit"
	// MaxDirectRequest bounds the JSON body of both requests.
	MaxDirectRequest = 8 << 10
	// UploadsPrefix holds, outside every job's prefix, the objects of direct
	// uploads until they are committed: .tether-uploads/<job-id>/<id>. One
	// top-level prefix, so one bucket lifecycle rule (S3 prefixes take no
	// wildcards) expires what a presigned URL wrote after its binding ended.
	UploadsPrefix = ReservedDir + "-uploads/"
)

// Mode is how a sidecar sends an object's body.
type Mode string

const (
	// ModeDirect: PUT to the store through the presigned URL, then commit.
	ModeDirect Mode = "direct"
	// ModeProxy: PUT through the binding server (/<Bucket>/<key>), as
	// always; the answer for the fs backend, a store that cannot presign,
	// a server that forces proxy mode, and manifests.
	ModeProxy Mode = "proxy"
)

// AuthorizeRequest asks to upload Size bytes to Key (<job-id>/<path>).
type AuthorizeRequest struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
	// Restart: the parts the store holds of the key's upload in parts are
	// not the file's (it changed): start a new upload.
	Restart bool `json:"restart,omitempty"`
	// Parts: the sidecar takes a ModeDirectParts answer (a sidecar from
	// before uploads in parts sends none and gets ModeDirect or ModeProxy).
	Parts bool `json:"parts,omitempty"`
}

// AuthorizeResponse says how to send the body. In ModeDirect, URL is a
// presigned single PUT of exactly Size bytes (Content-Length is signed),
// valid until Expires; Headers must be sent with it; Upload names the
// pending object for the commit. URL holds a signature: never log it.
type AuthorizeResponse struct {
	Mode    Mode              `json:"mode"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Upload  string            `json:"upload,omitempty"`
	Expires time.Time         `json:"expires,omitzero"`
	// Verify is how the commit verifies the upload: VerifyMD5 ("", what
	// servers before it said) means the store's ETag is the body's MD5 and
	// the sidecar checks it too; VerifyCRC64NVME means the store's ETags
	// are not MD5s (SSE-KMS, SSE-C): the sidecar ignores the ETag and the
	// commit checks the store's CRC-64/NVME against the claimed one.
	Verify Verify `json:"verify,omitempty"`
	// In ModeDirectParts: PartSize is every part's size but the last's,
	// Parts the first part URLs (more from PathParts), Stored the parts the
	// store already holds of this upload (it resumes).
	PartSize int64        `json:"partSize,omitempty"`
	Parts    []PartURL    `json:"parts,omitempty"`
	Stored   []StoredPart `json:"stored,omitempty"`
}

// Verify names what proves that a stored object holds the bytes sent.
type Verify string

const (
	// VerifyMD5: the store's ETag equals the MD5 (and its CRC-64/NVME, if
	// it reports one, the claimed one).
	VerifyMD5 Verify = ""
	// VerifyCRC64NVME: the store's CRC-64/NVME equals the claimed one; its
	// ETag says nothing.
	VerifyCRC64NVME Verify = "crc64nvme"
)

// CommitRequest claims that the upload Upload of Key holds Size bytes with
// MD5 (lowercase hex) and CRC64NVME (S3's base64 form), the digests the
// sidecar computed over the bytes it sent.
type CommitRequest struct {
	Key       string `json:"key"`
	Size      int64  `json:"size"`
	MD5       string `json:"md5"`
	CRC64NVME string `json:"crc64nvme,omitempty"`
	Upload    string `json:"upload"`
	// Parts, for an upload in parts, are its parts in order, each with
	// the MD5 of the bytes sent for it; CRC64NVME is then required.
	Parts []CommitPart `json:"parts,omitempty"`
}

// CommitResponse is a committed object: verified in the store and stored
// under its key (or its pending key, Pending true, until the binding ends).
// ETag is the verified MD5 (lowercase hex), CRC64NVME the store's checksum
// of the object, if it has one.
type CommitResponse struct {
	ETag      string `json:"etag"`
	Size      int64  `json:"size"`
	CRC64NVME string `json:"crc64nvme,omitempty"`
	Pending   bool   `json:"pending,omitempty"`
}

// MinCopyRate is the slowest server-side copy a commit waits for: its
// deadline is a base timeout plus the object's size at this rate (a 5 GiB
// object: base + 10.7 min). Server and sidecar use the same rule.
const MinCopyRate = 8 << 20

// CommitTimeout bounds a commit of size bytes: base (the server's callback
// timeout, or the sidecar's wait for any answer) plus the copy's time.
func CommitTimeout(base time.Duration, size int64) time.Duration {
	return base + time.Duration(size/MinCopyRate)*time.Second
}
