package artifactreads

import (
	"net/http"

	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"github.com/tether-dev/tether/api/names"
	tetherv1 "github.com/tether-dev/tether/api/v1alpha1"
)

// OpenAPIGroupVersion is the read API's key in the OpenAPI v3 discovery
// document (/openapi/v3): the kube-apiserver's aggregator merges it into
// its own and proxies /openapi/v3/<key> here, so the document is published
// at /openapi/v3/apis/artifacts.tether.dev/v1alpha1 on the API server.
const OpenAPIGroupVersion = "apis/" + tetherv1.ReadAPIGroup + "/" + tetherv1.ReadAPIVersion

// ObjectsPathTemplate is the one path the read API serves, in OpenAPI's
// path templating. {path} holds slashes, as the API server's own
// .../proxy/{path} does.
const ObjectsPathTemplate = "/" + OpenAPIGroupVersion + "/namespaces/{namespace}/" +
	tetherv1.ReadAPIResource + "/{name}/" + tetherv1.ReadAPISubresource + "/{path}"

// Component names of the error bodies.
const (
	readErrorSchema = "ReadError"
	statusSchema    = "io.k8s.apimachinery.pkg.apis.meta.v1.Status"
)

// newOpenAPIService serves the OpenAPI v3 discovery document and the read
// API's document with kube-openapi's handler: the hash in the
// serverRelativeURL, the ETag and the JSON or protobuf answer are the ones
// every Kubernetes API server gives.
func newOpenAPIService() *handler3.OpenAPIService {
	s := handler3.NewOpenAPIService()
	s.UpdateGroupVersion(OpenAPIGroupVersion, OpenAPI())
	return s
}

// OpenAPI is the read API's OpenAPI 3.0 document: what any client (the Go
// client in pkg/client, a Python script) calls, sends and is answered.
func OpenAPI() *spec3.OpenAPI {
	return &spec3.OpenAPI{
		Version: "3.0.0",
		Info: &spec.Info{InfoProps: spec.InfoProps{
			Title:   "Tether artifact reads (" + tetherv1.ReadAPIService + ")",
			Version: tetherv1.ReadAPIVersion,
			Description: "A bound job's stored objects, read through the kube-apiserver with the caller's own credentials " +
				"(docs/orchestrator.md, \"Without Go\"). The API server authorizes get on " + tetherv1.ReadAPIResource + "/" +
				tetherv1.ReadAPISubresource + " in " + tetherv1.ReadAPIGroup + ", then proxies to the control plane, which streams the object.",
		}},
		Paths: &spec3.Paths{Paths: map[string]*spec3.Path{ObjectsPathTemplate: objectsPath()}},
		Components: &spec3.Components{
			Schemas: map[string]*spec.Schema{readErrorSchema: readErrorBody(), statusSchema: statusBody()},
			SecuritySchemes: spec3.SecuritySchemes{"BearerToken": {SecuritySchemeProps: spec3.SecuritySchemeProps{
				Type: "apiKey", Name: "authorization", In: "header",
				Description: "Bearer token of the kubeconfig (or any credential the API server accepts: client certificate, exec plugin)",
			}}},
		},
		SecurityRequirement: []map[string][]string{{"BearerToken": {}}},
	}
}

func objectsPath() *spec3.Path {
	return &spec3.Path{PathProps: spec3.PathProps{
		Parameters: []*spec3.Parameter{
			pathParameter("namespace", "the WorkerBinding's namespace (its TrainJob's)"),
			pathParameter("name", "the WorkerBinding's name (its TrainJob's)"),
			pathParameter("path", "the object, relative to the job's prefix, slashes unescaped: manifest.json (node 0's manifest), "+
				"nodes/<rank>/manifest.json, a file a manifest lists (<path> for rank 0, nodes/<rank>/<path> for the others), "+
				".tether/logs/<pod>.log (an archived trainer log, as status.artifacts.logs lists it)"),
		},
		Get: &spec3.Operation{OperationProps: spec3.OperationProps{
			OperationId: "readWorkerBindingObject",
			Description: "Reads one stored object of a WorkerBinding: a manifest status.nodes[].artifacts.manifest names, a file a verified " +
				"manifest lists, or an archived log. The body is the object's bytes, streamed (never a redirect to the store). " +
				"The caller verifies what it reads: a manifest's SHA-256 against status.nodes[].artifacts.manifestSHA256, " +
				"a file's size and MD5 against the manifest.",
			Parameters: []*spec3.Parameter{{ParameterProps: spec3.ParameterProps{
				Name: names.HeaderStream, In: "header", Schema: stringSchema("true"),
				Description: "\"true\" asks for the object streamed through the control plane; through the API server every read is streamed, " +
					"and the Go client sends it so that older control planes stream too.",
			}}},
			Responses: &spec3.Responses{ResponsesProps: spec3.ResponsesProps{StatusCodeResponses: map[int]*spec3.Response{
				http.StatusOK: objectResponse(),
				http.StatusBadRequest: refusal("The path or the object's key is malformed (reason bad_path, bad_key)",
					controlPlane),
				http.StatusUnauthorized: refusal("The API server did not accept the credentials (a Status), or the request did not come "+
					"from the API server's front proxy (the control plane's not_proxied)", apiServer, controlPlane),
				http.StatusForbidden: refusal("The caller may not get "+tetherv1.ReadAPIResource+"/"+tetherv1.ReadAPISubresource+
					" in the namespace: the API server's RBAC refusal (a Status, reason Forbidden) or the control plane's own check "+
					"(reason forbidden)", apiServer, controlPlane),
				http.StatusNotFound: refusal("No WorkerBinding (no_binding), no stored object (no_object), not a verified artifact of "+
					"the binding (not_verified); or, from the API server, the read API is not installed (the APIService is absent: a Status "+
					"or the text \"404 page not found\")", apiServer, controlPlane),
				http.StatusConflict: refusal("The stored manifest is not the one verified (manifest_changed)", controlPlane),
				http.StatusTooManyRequests: withRetryAfter(refusal("More reads per second than the control plane replica reviews "+
					"(slow_down): retry after Retry-After", controlPlane)),
				http.StatusNotImplemented: refusal("The artifact backend cannot stream objects (no_reader)", controlPlane),
				http.StatusBadGateway:     refusal("The API server got no usable answer from the control plane (text, or a Status)", apiServer),
				http.StatusServiceUnavailable: withRetryAfter(refusal("The artifact store failed (store, with Retry-After), the control "+
					"plane could not review the caller (review_failed) or read its cache (cache), or has not read the front proxy's CA "+
					"(no_front_proxy_ca); or the API server cannot reach the control plane (the APIService is not Available: a Status)",
					apiServer, controlPlane)),
			}}},
		}},
	}}
}

func pathParameter(name, description string) *spec3.Parameter {
	return &spec3.Parameter{ParameterProps: spec3.ParameterProps{
		Name: name, In: "path", Required: true, Description: description, Schema: stringSchema(),
	}}
}

func stringSchema(enum ...any) *spec.Schema {
	return &spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"string"}, Enum: enum}}
}

func objectResponse() *spec3.Response {
	return &spec3.Response{ResponseProps: spec3.ResponseProps{
		Description: "The object's bytes",
		Headers: map[string]*spec3.Header{
			"Content-Length": {HeaderProps: spec3.HeaderProps{Description: "the object's size in bytes (the API server may pass the " +
				"body on chunked instead); the manifest's size is the one to check", Schema: &spec.Schema{SchemaProps: spec.SchemaProps{
				Type: spec.StringOrArray{"integer"}, Format: "int64"}}}},
			"ETag": {HeaderProps: spec3.HeaderProps{Description: "the store's ETag of the object, quoted: not a digest to verify " +
				"(a multipart object's ETag is not its MD5); verify the MD5 the manifest lists", Schema: stringSchema()}},
		},
		Content: map[string]*spec3.MediaType{"application/octet-stream": {MediaTypeProps: spec3.MediaTypeProps{
			Schema: &spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"string"}, Format: "binary"}},
		}}},
	}}
}

// Who answers a refusal: the control plane (a ReadError) or the API server
// in front of it (a metav1.Status, or plain text for some).
const (
	controlPlane = readErrorSchema
	apiServer    = statusSchema
)

func refusal(description string, bodies ...string) *spec3.Response {
	var schema *spec.Schema
	if len(bodies) == 1 {
		schema = ref(bodies[0])
	} else {
		schema = &spec.Schema{}
		for _, b := range bodies {
			schema.OneOf = append(schema.OneOf, *ref(b))
		}
	}
	content := map[string]*spec3.MediaType{"application/json": {MediaTypeProps: spec3.MediaTypeProps{Schema: schema}}}
	if len(bodies) > 1 || bodies[0] == apiServer {
		content["text/plain"] = &spec3.MediaType{MediaTypeProps: spec3.MediaTypeProps{Schema: stringSchema()}}
	}
	return &spec3.Response{ResponseProps: spec3.ResponseProps{Description: description, Content: content}}
}

func withRetryAfter(r *spec3.Response) *spec3.Response {
	r.Headers = map[string]*spec3.Header{"Retry-After": {HeaderProps: spec3.HeaderProps{
		Description: "seconds to wait before retrying (1 for slow_down, 5 for store)",
		Schema:      &spec.Schema{SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"integer"}}},
	}}}
	return r
}

func ref(component string) *spec.Schema {
	return &spec.Schema{SchemaProps: spec.SchemaProps{Ref: spec.MustCreateRef("#/components/schemas/" + component)}}
}

// readErrorBody is the control plane's refusal (ReadError).
func readErrorBody() *spec.Schema {
	return &spec.Schema{SchemaProps: spec.SchemaProps{
		Description: "The control plane's refusal: a reason a program can switch on, and a message naming the fix",
		Type:        spec.StringOrArray{"object"},
		Required:    []string{"reason", "message"},
		Properties: map[string]spec.Schema{
			"reason": *stringSchema("bad_path", "bad_key", "not_proxied", "forbidden", "no_binding", "no_object", "not_verified",
				"manifest_changed", "method", "slow_down", "no_reader", "store", "review_failed", "cache", "no_front_proxy_ca"),
			"message": *stringSchema(),
		},
	}}
}

// statusBody is the API server's refusal, the fields of metav1.Status a
// client reads.
func statusBody() *spec.Schema {
	str := *stringSchema()
	return &spec.Schema{SchemaProps: spec.SchemaProps{
		Description: "The API server's refusal (metav1.Status): kind is \"Status\"",
		Type:        spec.StringOrArray{"object"},
		Required:    []string{"kind"},
		Properties: map[string]spec.Schema{
			"kind": *stringSchema("Status"), "apiVersion": str, "status": str, "message": str, "reason": str,
			"code":    {SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"integer"}, Format: "int32"}},
			"details": {SchemaProps: spec.SchemaProps{Type: spec.StringOrArray{"object"}}},
		},
	}}
}
