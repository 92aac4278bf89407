// Umbrella header: the whole user-facing API of stepjit.
#ifndef STEPJIT_FRONTEND_STEPJIT_H_
#define STEPJIT_FRONTEND_STEPJIT_H_

#include "frontend/compile.h"
#include "runtime/amp/autocast.h"
#include "runtime/amp/grad_scaler.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/checkpoint.h"
#include "runtime/cuda/api.h"
#include "runtime/data/dataloader.h"
#include "runtime/data/dataset.h"
#include "runtime/data/idx.h"
#include "runtime/generator.h"
#include "runtime/nn/clip_grad.h"
#include "runtime/nn/functional.h"
#include "runtime/nn/layers.h"
#include "runtime/nn/module.h"
#include "runtime/nn/transformer.h"
#include "runtime/ops.h"
#include "runtime/optim/adamw.h"
#include "runtime/optim/lr_scheduler.h"
#include "runtime/optim/sgd.h"
#include "runtime/profiler.h"
#include "runtime/tensor.h"

#endif  // STEPJIT_FRONTEND_STEPJIT_H_
