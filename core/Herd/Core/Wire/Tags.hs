-- | The one table of message tags: the first byte of every message after
-- the handshake, per direction. Encoders, decoders and the hot paths'
-- hand-written encoders all take their numbers from here, so a tag is
-- written once. Pure.
module Herd.Core.Wire.Tags
  ( -- * Master to worker
    tagRunBatch, tagArgs, tagShutdown, tagStreamOpen, tagStreamIn, tagStreamEnd, tagStreamCredit
  , tagStreamClose, tagStatesReset, tagStateAdd, tagEvolveWith, tagEvolveState, tagStateRelease
  , tagStateReplay, tagPing, tagSharePart, tagShareDrop, tagHoldBudget
  , tagGroupRun, tagPartIn, tagPartitionCombine, tagExchangeEnd, tagStatesDrop, tagBatchCancel, tagTaskDeadline
  , tagPartRun, tagPartsDrop, tagGroupRunHeld, tagPartitionKeep, tagPartsDirectory, tagPartInFile
  , tagStealAsk, tagStolenRun, tagChildDone, tagChildThrew, tagChildLost, tagStolenCancel
    -- * Worker to master
  , tagResults, tagBatchDone, tagTaskThrew, tagBatchRejected, tagStreamOut, tagStreamDone
  , tagStreamAborted, tagStreamTaken, tagStateEvolved, tagEvolveThrew, tagEvolveRejected
  , tagStateReleased, tagStateKept, tagStateMissing, tagStatesCleared, tagStateReplayed, tagPong
  , tagShareHeld, tagShareDropped, tagShareSpilled
  , tagForward, tagGroupSent, tagGroupThrew, tagPartHeld, tagPartitionDone, tagPartitionThrew
  , tagBatchStopped, tagPartRan, tagPartThrew, tagPartMissing, tagGroupMissing, tagForwardFile
  , tagWantWork, tagChildrenHeld, tagStealGiven, tagStealNone, tagStolenDone, tagStolenThrew, tagStolenDropped, tagChildCounts, tagChildrenAbandoned
  ) where

import Data.Word (Word8)

-- | Tags of the messages to a worker.
tagRunBatch, tagArgs, tagShutdown, tagStreamOpen, tagStreamIn, tagStreamEnd, tagStreamCredit,
  tagStreamClose, tagStatesReset, tagStateAdd, tagEvolveWith, tagEvolveState, tagStateRelease,
  tagStateReplay, tagPing, tagSharePart, tagShareDrop, tagHoldBudget :: Word8
tagRunBatch = 1
tagArgs = 2
tagShutdown = 3
tagStreamOpen = 4
tagStreamIn = 5
tagStreamEnd = 6
tagStreamCredit = 7
tagStreamClose = 8
tagStatesReset = 9
tagStateAdd = 10
tagEvolveWith = 11
tagEvolveState = 12
tagStateRelease = 13
tagStateReplay = 14
tagPing = 15
tagSharePart = 16
tagShareDrop = 17
tagHoldBudget = 18

-- | Tags of the messages to a worker for keyed reductions, and of the
-- message that drops a failed evolve call's states.
tagGroupRun, tagPartIn, tagPartitionCombine, tagExchangeEnd, tagStatesDrop :: Word8
tagGroupRun = 19
tagPartIn = 20
tagPartitionCombine = 21
tagExchangeEnd = 22
tagStatesDrop = 23

-- | Tag of the message that stops a batch whose results are not wanted.
tagBatchCancel :: Word8
tagBatchCancel = 24

-- | Tag of the message that sets a worker's deadline per farm task.
tagTaskDeadline :: Word8
tagTaskDeadline = 25

-- | Tags of the messages to a worker for datasets ("Herd.Master.Job.Dataset").
tagPartRun, tagPartsDrop, tagGroupRunHeld, tagPartitionKeep :: Word8
tagPartRun = 26
tagPartsDrop = 27
tagGroupRunHeld = 28
tagPartitionKeep = 29

-- | Tags of the messages to a worker that hand a part over in a file on
-- the master's host.
tagPartsDirectory, tagPartInFile :: Word8
tagPartsDirectory = 30
tagPartInFile = 31

-- | Tags of the messages to a worker for children of "Herd.Par" that
-- other workers steal ("Herd.Core.Steal").
tagStealAsk, tagStolenRun, tagChildDone, tagChildThrew, tagChildLost, tagStolenCancel :: Word8
tagStealAsk = 32
tagStolenRun = 33
tagChildDone = 34
tagChildThrew = 35
tagChildLost = 36
tagStolenCancel = 37

-- | Tags of the messages to the master.
tagResults, tagBatchDone, tagTaskThrew, tagBatchRejected, tagStreamOut, tagStreamDone,
  tagStreamAborted, tagStreamTaken, tagStateEvolved, tagEvolveThrew, tagEvolveRejected,
  tagStateReleased, tagStateKept, tagStateMissing, tagStatesCleared, tagStateReplayed, tagPong,
  tagShareHeld, tagShareDropped, tagShareSpilled :: Word8
tagResults = 1
tagBatchDone = 2
tagTaskThrew = 3
tagBatchRejected = 4
tagStreamOut = 5
tagStreamDone = 6
tagStreamAborted = 7
tagStreamTaken = 8
tagStateEvolved = 9
tagEvolveThrew = 10
tagEvolveRejected = 11
tagStateReleased = 12
tagStateKept = 13
tagStateMissing = 14
tagStatesCleared = 15
tagStateReplayed = 16
tagPong = 17
tagShareHeld = 18
tagShareDropped = 19
tagShareSpilled = 20

-- | Tags of a worker's messages for keyed reductions.
tagForward, tagGroupSent, tagGroupThrew, tagPartHeld, tagPartitionDone, tagPartitionThrew :: Word8
tagForward = 21
tagGroupSent = 22
tagGroupThrew = 23
tagPartHeld = 24
tagPartitionDone = 25
tagPartitionThrew = 26

-- | Tag of a worker's word that it stopped a batch it was told to.
tagBatchStopped :: Word8
tagBatchStopped = 27

-- | Tags of a worker's messages for datasets.
tagPartRan, tagPartThrew, tagPartMissing, tagGroupMissing :: Word8
tagPartRan = 28
tagPartThrew = 29
tagPartMissing = 30
tagGroupMissing = 31

-- | Tag of a worker's part for another worker, handed over in a file.
tagForwardFile :: Word8
tagForwardFile = 32

-- | Tags of a worker's messages for stolen children ("Herd.Core.Steal").
tagWantWork, tagChildrenHeld, tagStealGiven, tagStealNone, tagStolenDone, tagStolenThrew, tagStolenDropped, tagChildCounts, tagChildrenAbandoned :: Word8
tagWantWork = 33
tagChildrenHeld = 34
tagStealGiven = 35
tagStealNone = 36
tagStolenDone = 37
tagStolenThrew = 38
tagStolenDropped = 39
tagChildCounts = 40
tagChildrenAbandoned = 41
