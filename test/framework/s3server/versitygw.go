package s3server

import "net"

// versityLaunch is versitygw's posix backend on opts.Dir, one free port.
func versityLaunch(opts Options) (launch, error) {
	addr, err := freeAddrs(1)
	if err != nil {
		return launch{}, err
	}
	args := []string{"--port", addr[0], "--access", opts.AccessKey, "--secret", opts.SecretKey, "--quiet", "--keep-alive"}
	if opts.CertFile != "" {
		args = append(args, "--cert", opts.CertFile, "--key", opts.KeyFile)
	}
	args = append(args, "posix", opts.Dir)
	return launch{args: args, endpoint: addr[0]}, nil
}

// freeAddrs returns n distinct free 127.0.0.1:port addresses (all held
// open while picking, so no two are the same; any may be taken again
// before the server binds it, which Start's retries cover).
func freeAddrs(n int) ([]string, error) {
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		out = append(out, ln.Addr().String())
	}
	return out, nil
}
