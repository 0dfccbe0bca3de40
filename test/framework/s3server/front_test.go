package s3server_test

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/tether-dev/tether/pkg/upload"
	"github.com/tether-dev/tether/test/framework/s3server"
)

// TestFront checks each fault of the tests' S3 front against versitygw: the
// ETags and checksums it answers for one object PUT with its checksum.
func TestFront(t *testing.T) {
	ctx := context.Background()
	s, err := s3server.Start(ctx, s3server.Options{Dir: t.TempDir(), AccessKey: "front-access", SecretKey: "front-secret-0123456789"})
	if errors.Is(err, s3server.ErrNoBinary) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if err := s.MakeBucket(ctx, "front", false); err != nil {
		t.Fatal(err)
	}
	body := "the bytes of one artifact"
	sum := md5.Sum([]byte(body))
	md5hex := hex.EncodeToString(sum[:])
	crc := upload.CRC64NVMEOf([]byte(body))
	for _, tc := range []struct {
		fault           s3server.Fault
		etagMD5, crcOK  bool
		crcNone, onlyOK bool
	}{
		{fault: s3server.FaultNone, etagMD5: true, crcOK: true},
		{fault: s3server.FaultRandomETag, crcOK: true},
		{fault: s3server.FaultWrongETag, crcOK: true},
		{fault: s3server.FaultWrongChecksum, etagMD5: true},
		{fault: s3server.FaultNoChecksums, etagMD5: true, crcNone: true},
	} {
		t.Run(tc.fault.String(), func(t *testing.T) {
			f, err := s3server.NewFront(s.Endpoint, tc.fault)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			c, err := minio.New(f.Endpoint, &minio.Options{Creds: credentials.NewStaticV4("front-access", "front-secret-0123456789", ""), Region: "us-east-1"})
			if err != nil {
				t.Fatal(err)
			}
			key := "k-" + tc.fault.String()
			put, err := minio.Core{Client: c}.PutObject(ctx, "front", key, strings.NewReader(body), int64(len(body)), "", "",
				minio.PutObjectOptions{DisableMultipart: true, UserMetadata: map[string]string{upload.ChecksumHeader: crc}})
			if err != nil {
				t.Fatal(err)
			}
			head, err := c.StatObject(ctx, "front", key, minio.StatObjectOptions{Checksum: true})
			if err != nil {
				t.Fatal(err)
			}
			for what, etag := range map[string]string{"PUT": put.ETag, "HEAD": head.ETag} {
				if got := etag == md5hex; got != tc.etagMD5 {
					t.Errorf("%s ETag %s, the MD5 %s: equal %v, want %v", what, etag, md5hex, got, tc.etagMD5)
				}
				if len(etag) != 32 {
					t.Errorf("%s ETag %q does not look like an MD5", what, etag)
				}
			}
			switch got := head.ChecksumCRC64NVME; {
			case tc.crcNone && got != "":
				t.Errorf("HEAD checksum %q, want none", got)
			case !tc.crcNone && (got == crc) != tc.crcOK:
				t.Errorf("HEAD checksum %q, the body's %s: equal %v, want %v", got, crc, got == crc, tc.crcOK)
			}
			// Limited to other keys, the fault leaves this one alone.
			f.Only("no-such-key")
			head, err = c.StatObject(ctx, "front", key, minio.StatObjectOptions{Checksum: true})
			if err != nil || head.ETag != md5hex || head.ChecksumCRC64NVME != crc && !tc.crcNone {
				t.Errorf("with the fault limited to other keys: ETag %s checksum %s, %v; want %s and %s", head.ETag, head.ChecksumCRC64NVME, err, md5hex, crc)
			}
		})
	}
}

func TestParseFault(t *testing.T) {
	for _, f := range []s3server.Fault{s3server.FaultNone, s3server.FaultRandomETag, s3server.FaultRandomETag | s3server.FaultNoChecksums, s3server.FaultWrongETag | s3server.FaultWrongChecksum} {
		if got, err := s3server.ParseFault(f.String()); err != nil || got != f {
			t.Errorf("ParseFault(%q) = %v, %v; want %v", f.String(), got, err, f)
		}
	}
	if _, err := s3server.ParseFault("sse-kms"); err == nil {
		t.Error("an unknown fault parsed")
	}
}
