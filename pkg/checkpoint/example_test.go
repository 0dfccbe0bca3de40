package checkpoint_test

import (
	"fmt"
	"time"

	"github.com/tether-dev/tether/pkg/checkpoint"
)

func ExampleDetector_Newest() {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	files := []checkpoint.File{
		// checkpoint-500/ is complete: every file verified.
		{Path: "output/checkpoint-500/model.safetensors", Size: 4096, Verified: true, VerifiedAt: at},
		{Path: "output/checkpoint-500/trainer_state.json", Size: 100, Verified: true, VerifiedAt: at.Add(time.Second)},
		// checkpoint-1000/ is still being uploaded.
		{Path: "output/checkpoint-1000/model.safetensors", Size: 4096, Verified: true, VerifiedAt: at.Add(time.Minute)},
		{Path: "output/checkpoint-1000/trainer_state.json", Size: 100},
	}
	d := checkpoint.NewDetector(checkpoint.HuggingFace)
	cp := d.Newest(files)
	fmt.Println(cp.Path, cp.Step, cp.Files, cp.Bytes, cp.VerifiedAt.Format(time.TimeOnly))

	// A pattern the user gives, e.g. a Lightning-style file per checkpoint.
	p, err := checkpoint.ParsePattern("epoch={epoch}-step={step}.ckpt")
	if err != nil {
		panic(err)
	}
	path, step, _ := p.Match("checkpoints/epoch=3-step=900.ckpt")
	fmt.Println(path, step)

	_, err = checkpoint.ParsePattern("checkpoint/")
	fmt.Println(err != nil)
	// Output:
	// output/checkpoint-500/ 500 2 4196 03:04:06
	// checkpoints/epoch=3-step=900.ckpt 900
	// true
}
