// strata-envoy-validate: reads an Envoy bootstrap as JSON on stdin and checks it the way
// Envoy's own config loading starts: a strict protojson decode into the v3 Bootstrap message
// (unknown fields, wrong types, unknown enum values and unresolvable typed_config @types are
// errors), then the protoc-gen-validate rules Envoy declares on every message (required
// fields, ranges, durations, string patterns). What it cannot check is Envoy's runtime
// semantics (it does not start listeners or resolve DNS): docs/kubernetes.md says so.
//
// Exit 0 and "ok" when valid; exit 1 and the reasons otherwise.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	// Every extension type the chart's envoy.yaml names in a typed_config must be linked in,
	// so that its @type resolves; a type missing here fails with "unable to resolve".
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/stream/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/local_ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/connection_limit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/downstream_connections/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/resource_monitors/fixed_heap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

func main() {
	raw, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail("reading stdin: %v", err)
	}
	var cfg bootstrap.Bootstrap
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(raw, &cfg); err != nil {
		fail("not a valid envoy.config.bootstrap.v3.Bootstrap: %v", err)
	}
	problems := validateTree(cfg.ProtoReflect(), "bootstrap")
	if len(problems) > 0 {
		fail("constraint violations:\n  %s", strings.Join(problems, "\n  "))
	}
	fmt.Println("ok")
}

type validator interface{ ValidateAll() error }

// validateTree runs a message's own rules and then those of every typed_config inside it:
// protoc-gen-validate treats a google.protobuf.Any as opaque, so each one is unpacked to its
// concrete type (listeners -> filters -> HCM -> http filters ...) and checked in turn.
func validateTree(m protoreflect.Message, path string) []string {
	var problems []string
	if v, ok := m.Interface().(validator); ok && m.Descriptor().FullName() != "google.protobuf.Any" {
		if err := v.ValidateAll(); err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", path, err))
		}
	}
	if m.Descriptor().FullName() == "google.protobuf.Any" {
		inner, err := m.Interface().(*anypb.Any).UnmarshalNew()
		if err != nil {
			return append(problems, fmt.Sprintf("%s: %v", path, err))
		}
		// The inner message's own ValidateAll runs in the recursive call.
		return append(problems, validateTree(inner.ProtoReflect(), path+"("+string(inner.ProtoReflect().Descriptor().Name())+")")...)
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil {
			return true
		}
		name := path + "." + string(fd.Name())
		switch {
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				problems = append(problems, validateTree(v.List().Get(i).Message(), fmt.Sprintf("%s[%d]", name, i))...)
			}
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
					problems = append(problems, validateTree(mv.Message(), fmt.Sprintf("%s[%s]", name, k.String()))...)
					return true
				})
			}
		default:
			problems = append(problems, validateTree(v.Message(), name)...)
		}
		return true
	})
	return problems
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}
