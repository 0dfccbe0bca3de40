package s3server_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/tether-dev/tether/test/framework/s3server"
)

// A versitygw on loopback, one bucket, one object whose ETag is its MD5.
func Example() {
	dir, _ := os.MkdirTemp("", "s3server-example-")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	s, err := s3server.Start(ctx, s3server.Options{Dir: dir, AccessKey: "example-access", SecretKey: "example-secret-0123456789"})
	if err != nil {
		fmt.Println(err) // versitygw not built: `bash hack/testbin.sh versitygw`
		return
	}
	defer s.Stop()
	if err := s.MakeBucket(ctx, "demo", false); err != nil {
		fmt.Println(err)
		return
	}
	info, err := s.Admin.PutObject(ctx, "demo", "greeting.txt", strings.NewReader("hello"), 5, minio.PutObjectOptions{DisableMultipart: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	obj, _ := s.Admin.GetObject(ctx, "demo", "greeting.txt", minio.GetObjectOptions{})
	defer obj.Close()
	b := make([]byte, 5)
	_, _ = obj.Read(b)
	fmt.Println(string(b), info.ETag == "5d41402abc4b2a76b9719d911017c592")
	// Output: hello true
}
