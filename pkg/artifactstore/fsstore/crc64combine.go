package fsstore

// The CRC-64/NVME of a concatenation from the CRCs of its pieces, without
// their bytes: zlib's crc32_combine (GF(2) matrices) for the 64-bit CRC.
// A CRC with an all-ones initial value and final xor, like zlib's and
// CRC-64/NVME, satisfies crc(A‖B) = Z(len B)·crc(A) ⊕ crc(B), where Z(n)
// is the linear map that feeds n zero bytes through the CRC register.

// crc64NVMEPoly is CRC-64/NVME's polynomial, reflected (as the register
// shifts right).
const crc64NVMEPoly = 0x9a6c9329ac4bc9b5

// gf2Matrix is a 64×64 matrix over GF(2), column i the image of bit i.
type gf2Matrix [64]uint64

// times is m·v.
func (m *gf2Matrix) times(v uint64) uint64 {
	var sum uint64
	for i := 0; v != 0; i, v = i+1, v>>1 {
		if v&1 != 0 {
			sum ^= m[i]
		}
	}
	return sum
}

// compose is m·n.
func (m *gf2Matrix) compose(n *gf2Matrix) gf2Matrix {
	var r gf2Matrix
	for i := range r {
		r[i] = m.times(n[i])
	}
	return r
}

// zeroBytes is Z(n): the register after n zero bytes.
func zeroBytes(n int64) gf2Matrix {
	// One zero bit: shift right, xor the polynomial if bit 0 was set.
	var op gf2Matrix
	op[0] = crc64NVMEPoly
	for i := 1; i < 64; i++ {
		op[i] = 1 << (i - 1)
	}
	for range 3 { // 2, 4, 8 bits: one byte
		op = op.compose(&op)
	}
	var r gf2Matrix
	for i := range r {
		r[i] = 1 << i
	}
	for ; n > 0; n >>= 1 {
		if n&1 != 0 {
			r = op.compose(&r)
		}
		op = op.compose(&op)
	}
	return r
}

// crcJoin accumulates the CRC-64/NVME of consecutive pieces, each given by
// its CRC and length. Z(n) is computed once per length: every part of an
// upload but the last has the same length, so joining 10,000 parts costs
// two such computations and 10,000 matrix-vector products.
type crcJoin struct {
	crc  uint64
	ops  map[int64]*gf2Matrix
	size int64
}

// add appends a piece of n bytes whose CRC-64/NVME is crc.
func (j *crcJoin) add(crc uint64, n int64) {
	if j.ops == nil {
		j.ops = map[int64]*gf2Matrix{}
	}
	op, ok := j.ops[n]
	if !ok {
		z := zeroBytes(n)
		op = &z
		j.ops[n] = op
	}
	j.crc = op.times(j.crc) ^ crc
	j.size += n
}
