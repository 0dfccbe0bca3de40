package mutate

import (
	kjson "sigs.k8s.io/json"
)

// decodeObject decodes an admitted object's JSON into into as the API server
// decodes it: field names match exactly (encoding/json would also take
// "speC" for "spec"). The API server sends its own encoding, so its objects
// decode the same either way; a document with other spellings would
// otherwise be read as one thing and patched as another (FuzzPodHandler
// found a pod whose "speC" drew a patch to /spec, which it does not have).
func decodeObject(raw []byte, into any) error {
	return kjson.UnmarshalCaseSensitivePreserveInts(raw, into)
}
