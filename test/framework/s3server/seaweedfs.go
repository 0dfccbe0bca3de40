package s3server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
)

// seaweedIdentity is one identity of SeaweedFS's static S3 configuration
// (-s3.config).
type seaweedIdentity struct {
	Name        string              `json:"name"`
	Credentials []map[string]string `json:"credentials"`
	Actions     []string            `json:"actions"`
}

// seaweedLaunch is `weed server` with its master, one volume server, the
// filer and the S3 gateway on eight free loopback ports, everything it
// writes under opts.Dir: data, its S3 identities (one: the root
// credentials, every action), logs on stderr (glog would write files to
// /tmp), no telemetry, no Iceberg or Lance listeners, no embedded IAM API.
func seaweedLaunch(opts Options) (launch, error) {
	data := filepath.Join(opts.Dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return launch{}, err
	}
	cfg, err := json.Marshal(map[string][]seaweedIdentity{"identities": {{
		Name:        "tether-admin",
		Credentials: []map[string]string{{"accessKey": opts.AccessKey, "secretKey": opts.SecretKey}},
		Actions:     []string{"Admin", "Read", "List", "Tagging", "Write"},
	}}})
	if err != nil {
		return launch{}, err
	}
	cfgFile := filepath.Join(opts.Dir, "s3.json")
	if err := os.WriteFile(cfgFile, cfg, 0o600); err != nil {
		return launch{}, err
	}
	addrs, err := freeAddrs(8)
	if err != nil {
		return launch{}, err
	}
	port := func(i int) string {
		_, p, _ := net.SplitHostPort(addrs[i])
		return p
	}
	master, s3 := addrs[0], addrs[6]
	args := []string{
		"-logtostderr=true", "-v=0", "-config_dir=" + opts.Dir,
		"server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-dir=" + data,
		"-master.port=" + port(0), "-master.port.grpc=" + port(1), "-master.telemetry=false",
		// Volumes of 64 MiB, grown one at a time (the environment below):
		// every bucket is a collection with volumes of its own, and the
		// tests make many buckets.
		"-master.volumeSizeLimitMB=64", "-volume.max=1000",
		"-volume.port=" + port(2), "-volume.port.grpc=" + port(3), "-volume.preStopSeconds=0",
		"-filer", "-filer.port=" + port(4), "-filer.port.grpc=" + port(5),
		"-filer.localSocket=" + filepath.Join(opts.Dir, "filer.sock"),
		"-s3", "-s3.port=" + port(6), "-s3.port.grpc=" + port(7), "-s3.config=" + cfgFile,
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.iam=false",
		"-s3.localSocket=" + filepath.Join(opts.Dir, "s3.sock"),
	}
	if opts.CertFile != "" {
		args = append(args, "-s3.cert.file="+opts.CertFile, "-s3.key.file="+opts.KeyFile)
	}
	grpcPorts := []string{port(1), port(3), port(5), port(7)}
	return launch{
		args: args,
		// HOME: SeaweedFS also reads its configuration from ~/.seaweedfs.
		// The allocation deferral holds a new master's first volume for a
		// warmup window (5 s), against reusing volume ids after a lost
		// master state; a store made empty for a test has none to reuse.
		env:      []string{"HOME=" + opts.Dir, "WEED_MASTER_VOLUME_GROWTH_COPY_1=1", "WEED_MASTER_VOLUME_GROWTH_ALLOCATION_DEFERRAL=0s"},
		endpoint: s3,
		ready: func(ctx context.Context, s *Server) error {
			if err := seaweedWritable(ctx, master); err != nil {
				return err
			}
			return probeWrite(ctx, s)
		},
		// SIGKILL at once: after SIGTERM its master and gateway keep
		// retrying the stopped filer for more than 10 s. What a graceful
		// stop would remove, the gRPC sockets in /tmp, cleanup does.
		cleanup: func() { removeSeaweedSockets(grpcPorts) },
	}, nil
}

// seaweedWritable says whether the master knows a volume server with free
// volume slots: before that, the S3 gateway answers but a PUT fails.
func seaweedWritable(ctx context.Context, master string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+master+"/dir/status", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var st struct {
		Topology struct{ Free int64 }
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return fmt.Errorf("master /dir/status: %w", err)
	}
	if st.Topology.Free <= 0 {
		return fmt.Errorf("master %s has no volume server with free volume slots yet", master)
	}
	return nil
}

// probeWrite stores and removes an object in a bucket of its own: the S3
// gateway answers, and a volume server is known, seconds before the
// filer's lock ring (every PUT takes a lock in it) knows the filer.
func probeWrite(ctx context.Context, s *Server) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	const bucket = "s3server-ready-probe"
	if ok, err := s.Admin.BucketExists(ctx, bucket); err != nil {
		return err
	} else if !ok {
		if err := s.Admin.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
			return err
		}
	}
	if _, err := s.Admin.PutObject(ctx, bucket, "probe", strings.NewReader("ready"), 5, minio.PutObjectOptions{DisableMultipart: true}); err != nil {
		return fmt.Errorf("probe PUT: %w", err)
	}
	if err := s.Admin.RemoveObject(ctx, bucket, "probe", minio.RemoveObjectOptions{}); err != nil {
		return err
	}
	return s.Admin.RemoveBucket(ctx, bucket)
}

// removeSeaweedSockets removes the gRPC sockets `weed server` makes in
// /tmp (named by port), left behind if it was killed.
func removeSeaweedSockets(ports []string) {
	for _, p := range ports {
		if _, err := strconv.Atoi(p); err != nil {
			continue
		}
		for _, svc := range []string{"master", "volume", "filer", "s3"} {
			// The path is fixed in `weed server`, not taken from TMPDIR.
			_ = os.Remove("/tmp/seaweedfs-" + svc + "-grpc-" + p + ".sock")
		}
	}
}
