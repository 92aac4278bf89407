// Umbrella header: the whole user-facing API of stepjit.
#ifndef STEPJIT_FRONTEND_STEPJIT_H_
#define STEPJIT_FRONTEND_STEPJIT_H_

#include "devices/cuda/api.h"
#include "frontend/compile.h"
#include "runtime/amp/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/generator.h"
#include "runtime/ops.h"
#include "runtime/profiler.h"
#include "runtime/tensor.h"
#include "training/amp/grad_scaler.h"
#include "training/checkpoint.h"
#include "training/data/dataloader.h"
#include "training/data/dataset.h"
#include "training/data/idx.h"
#include "training/nn/clip_grad.h"
#include "training/nn/functional.h"
#include "training/nn/layers.h"
#include "training/nn/module.h"
#include "training/nn/resnet.h"
#include "training/nn/transformer.h"
#include "training/optim/adamw.h"
#include "training/optim/lr_scheduler.h"
#include "training/optim/sgd.h"

#endif  // STEPJIT_FRONTEND_STEPJIT_H_
