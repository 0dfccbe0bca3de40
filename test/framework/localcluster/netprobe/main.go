// Command netprobe is the test image that proves the local cluster's network
// from inside pods (test/framework/localcluster, network_test.go). `netprobe
// serve` answers HTTP with its pod's name; `netprobe check` runs the checks
// its flags name, prints one line per check ("ok ..." or "FAIL ...") and
// exits 1 if any failed:
//
//	-get URL       an HTTP GET answering 200 (repeatable)
//	-lookup NAME   NAME resolves through the pod's resolv.conf (repeatable)
//	-no-lookup NAME  NAME does not resolve (repeatable)
//	-in-cluster    client-go's in-cluster config reaches the apiserver
//	-no-route IP   the pod has no route to IP (connect on a UDP socket does
//	               the route lookup and sends nothing)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: netprobe serve [-listen ADDR] | netprobe check [-get URL]... [-lookup NAME]... [-in-cluster] [-no-route IP]")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		os.Exit(serve(os.Args[2:]))
	case "check":
		os.Exit(check(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "netprobe: unknown command %q (want serve or check)\n", os.Args[1])
		os.Exit(2)
	}
}

func serve(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	listen := fs.String("listen", ":8080", "address to serve HTTP on")
	_ = fs.Parse(args)
	name, _ := os.Hostname()
	srv := &http.Server{Addr: *listen, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "netprobe %s\n", name)
	})}
	go func() {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "netprobe:", err)
		return 1
	}
	return 0
}

func check(args []string) int {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	var gets, lookups list
	fs.Var(&gets, "get", "URL to GET (repeatable)")
	fs.Var(&lookups, "lookup", "name to resolve (repeatable)")
	var noLookups list
	fs.Var(&noLookups, "no-lookup", "name that must not resolve (repeatable)")
	inCluster := fs.Bool("in-cluster", false, "reach the apiserver with the in-cluster config")
	noRoute := fs.String("no-route", "", "an address the pod must have no route to")
	_ = fs.Parse(args)
	failed := false
	report := func(what string, detail string, err error) {
		if err != nil {
			failed = true
			fmt.Printf("FAIL %s: %v\n", what, err)
			return
		}
		fmt.Printf("ok %s: %s\n", what, detail)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, u := range gets {
		body, err := get(client, u)
		report("get "+u, body, err)
	}
	for _, name := range lookups {
		addrs, err := net.LookupHost(name)
		report("lookup "+name, strings.Join(addrs, ","), err)
	}
	for _, name := range noLookups {
		addrs, err := net.LookupHost(name)
		if err == nil {
			err = fmt.Errorf("resolved to %s", strings.Join(addrs, ","))
		} else {
			err = nil
		}
		report("no-lookup "+name, "does not resolve", err)
	}
	if *inCluster {
		v, err := serverVersion()
		report("in-cluster", v, err)
	}
	if *noRoute != "" {
		err := expectNoRoute(*noRoute)
		report("no-route "+*noRoute, "network is unreachable", err)
	}
	if failed {
		return 1
	}
	return 0
}

func get(client *http.Client, url string) (string, error) {
	// The Service may have no endpoint programmed yet on this node: a few
	// tries, each bounded.
	var last error
	for range 10 {
		resp, err := client.Get(url)
		if err == nil {
			body, rerr := io.ReadAll(io.LimitReader(resp.Body, 4096))
			_ = resp.Body.Close()
			if rerr == nil && resp.StatusCode == http.StatusOK {
				return strings.TrimSpace(string(body)), nil
			}
			err = fmt.Errorf("status %d, body %q, read error %v", resp.StatusCode, body, rerr)
		}
		last = err
		time.Sleep(time.Second)
	}
	return "", last
}

func serverVersion() (string, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return "", err
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := cs.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return "", err
	}
	return cfg.Host + " " + strings.Join(strings.Fields(string(v)), " "), nil
}

func expectNoRoute(ip string) error {
	conn, err := net.Dial("udp", net.JoinHostPort(ip, "9"))
	if err == nil {
		local := conn.LocalAddr().String()
		_ = conn.Close()
		return fmt.Errorf("the pod has a route to %s (it would send from %s)", ip, local)
	}
	if errors.Is(err, syscall.ENETUNREACH) {
		return nil
	}
	return fmt.Errorf("want ENETUNREACH, got %w", err)
}
