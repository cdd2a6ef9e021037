#!/usr/bin/env bash
# Puts the GPU checks' models into .device-models/ (git-ignored), small enough to travel with a
# device call (`carry: [".device-models"]`): tinystories-656k and its fp32 GGUF as they are (the
# backend check writes quantized copies of the GGUF itself), and stories260K
# converted from its llama2.c checkpoint to a Hugging Face directory by our converter (the
# built dist/). gpu-plan.sh's backend step reads them from .device-models/.
#   STRATA_MODELS_DIR=<folder holding tinystories-656k/ and stories260K/> bash scripts/device/prepare-models.sh
set -euo pipefail
: "${STRATA_MODELS_DIR:?set STRATA_MODELS_DIR to the folder holding tinystories-656k/ and stories260K/}"
cd "$(dirname "$0")/../.."
out=.device-models
rm -rf "$out"
mkdir -p "$out"
cp -r "$STRATA_MODELS_DIR/tinystories-656k" "$STRATA_MODELS_DIR/tinystories-656k-gguf" "$out/"
node services/inference-backend/dist/convert/cli.js llama2c \
  --checkpoint "$STRATA_MODELS_DIR/stories260K/stories260K.bin" \
  --tokenizer "$STRATA_MODELS_DIR/stories260K/tok512.model" --out "$out/stories260K"
du -sh "$out"/*
