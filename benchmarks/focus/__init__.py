"""The Focus study: speed, language-model quality, the pretrained model, its operating
point, passkeys, the verdict and the kernel timing studies. See README.md."""
