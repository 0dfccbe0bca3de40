package upload

// Resuming a proxied upload (docs/artifacts.md, "Files in parts"): a body
// the binding server stores in parts keeps its stored parts when the
// request ends early. Before it sends a large file again the sidecar asks
// where to resume; if the bytes the stored parts hold are still the file's
// (their checksum says so) it sends only the rest, in one PUT with
// names.HeaderResumeOffset and names.HeaderResumeCRC64NVME.
const (
	// PathResume answers where an upload of a key may resume (POST, JSON
	// ResumeRequest → ResumeResponse).
	PathResume = "/v1/artifacts/resume"
)

// ResumeRequest asks where an upload of Size bytes to Key may resume.
type ResumeRequest struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
}

// ResumeResponse says the stored parts of the key's open upload hold the
// object's first Offset bytes, whose CRC-64/NVME (S3's form) is CRC64NVME.
// Offset 0: nothing to resume from; send the whole body. PartSize is the
// upload's part size (0 when the body would not be stored in parts).
type ResumeResponse struct {
	Offset    int64  `json:"offset"`
	CRC64NVME string `json:"crc64nvme,omitempty"`
	PartSize  int64  `json:"partSize,omitempty"`
}
