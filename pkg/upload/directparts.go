package upload

// Direct uploads in parts (docs/artifacts.md, "Files in parts"): a file of
// at least the multipart threshold goes straight to the store as a
// multipart upload the binding server created, through presigned URLs of
// single parts; the server alone completes it, after checking every part.
const (
	// ModeDirectParts: PUT each part to its presigned URL (AuthorizeResponse
	// Parts, more from PathParts), then commit with the parts' MD5s.
	ModeDirectParts Mode = "direct-parts"
	// PathParts presigns the next parts of a direct upload in parts (POST,
	// JSON PartsRequest → PartsResponse).
	PathParts = "/v1/artifacts/parts"
	// PartsPerBatch is how many part URLs one answer carries at most.
	PartsPerBatch = 32
)

// PartURL is a presigned PUT of one part: exactly its size in bytes
// (Content-Length is signed) to upload Number of the authorized upload.
// URL holds a signature: never log it.
type PartURL struct {
	Number  int               `json:"number"`
	Size    int64             `json:"size"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
}

// StoredPart is a part the store holds of an upload that resumes: the
// sidecar skips it if its bytes in the file have MD5 ETag.
type StoredPart struct {
	Number int    `json:"number"`
	Size   int64  `json:"size"`
	ETag   string `json:"etag"`
}

// PartsRequest asks for the part URLs of upload Upload (of Key, Size bytes)
// from part From on.
type PartsRequest struct {
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	Upload string `json:"upload"`
	From   int    `json:"from"`
}

// PartsResponse carries part URLs valid until Expires.
type PartsResponse struct {
	Parts   []PartURL `json:"parts"`
	Expires string    `json:"expires,omitempty"`
}

// CommitPart is one part a commit claims: its number and the MD5 (lowercase
// hex) of the bytes sent for it.
type CommitPart struct {
	Number int    `json:"number"`
	MD5    string `json:"md5"`
}
